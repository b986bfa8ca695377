"""Gradients without a static shape never stop a training run (issue 19).

An `Embedding`'s `tf.IndexedSlices` gradient passed into a `tf.function`
from outside (a custom loop) has a dense shape known only at run time, as
does any gradient traced with an `input_signature` of unknown dims. The
monitor records the statistics of the dense gradient (duplicate indices
summed) and the inner optimizer's update is the unwrapped one, bit for bit.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_gradmon import GradientMonitorOptimizer
from keras_gradmon.columns import COLUMNS, STATISTICS
from keras_gradmon.core.clipping import as_gradient
from keras_gradmon.core.clipping.agc import AdaptiveGradientClip
from keras_gradmon.core.clipping.autoclip import AutoClip
from keras_gradmon.core.clipping.base import global_norm_of
from keras_gradmon.core.clipping.global_norm import GlobalNormClip
from keras_gradmon.core.clipping.zclip import ZClip
from keras_gradmon.core.config import MonitorConfig
from keras_gradmon.core.monitor import GradientMonitor
from keras_gradmon.legacy.stepped import make_tf_variable
from tests.reference import reference_histogram, reference_statistics

# Row 1 four times, row 3 twice: duplicate indices in one batch.
_IDS = np.array([[1, 1, 3, 0], [1, 3, 1, 7]], "int32")
_TARGETS = np.array([[0.5], [-1.0]], "float32")
_VOCAB, _STEPS = 12, 3


def _model() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((4,), dtype="int32"),
            keras.layers.Embedding(_VOCAB, 3),
            keras.layers.Flatten(),
            keras.layers.Dense(1),
        ]
    )


def _custom_loop(optimizer, steps: int = _STEPS) -> tuple[keras.Model, list, list]:
    """Gradients computed eagerly and passed INTO a tf.function that applies
    them; returns the model, the last step's gradients and weights before."""
    model = _model()

    @tf.function
    def apply(grads):
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean((model(_IDS) - _TARGETS) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        assert isinstance(grads[0], tf.IndexedSlices)
        before = [v.numpy() for v in model.trainable_variables]
        apply(grads)
    return model, grads, before


def _assert_close(got: dict, values: np.ndarray) -> None:
    want = reference_statistics(values)
    for name in STATISTICS:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=name)


def _monitored(**options) -> GradientMonitorOptimizer:
    return GradientMonitorOptimizer(
        keras.optimizers.Adam(0.05),
        every_n_steps=1,
        histogram_every_n_steps=1,
        histogram_buckets=7,
        **options,
    )


@pytest.fixture(scope="module")
def unwrapped_weights() -> list:
    """The weights of the custom loop with plain Adam, run once."""
    return _custom_loop(keras.optimizers.Adam(0.05))[0].get_weights()


@pytest.mark.parametrize(
    "options",
    [
        {},
        # The skip's test and the clipping rule both read the slices.
        {
            "skip_nonfinite": True,
            "clipping": {"method": "global_norm", "max_norm": 1e3},
        },
    ],
    ids=["plain", "skip_nonfinite-clipping"],
)
def test_indexed_slices_passed_into_function(options, unwrapped_weights):
    optimizer = _monitored(**options)
    model, grads, before = _custom_loop(optimizer)
    for got, want in zip(model.get_weights(), unwrapped_weights):
        np.testing.assert_array_equal(got, want)

    dense = tf.convert_to_tensor(grads[0]).numpy().astype(np.float64)
    assert np.count_nonzero(dense.any(axis=1)) == 4  # rows 0, 1, 3 and 7
    indices = grads[0].indices.numpy()
    assert len(indices) > len(np.unique(indices))  # duplicates, summed in dense
    snapshot = optimizer.snapshot()
    assert snapshot.step == _STEPS - 1
    _assert_close(dict(zip(COLUMNS, snapshot.grad[0])), dense)
    _assert_close(dict(zip(COLUMNS, snapshot.weight[0])), before[0])
    every = np.concatenate([np.ravel(tf.convert_to_tensor(g)) for g in grads])
    np.testing.assert_allclose(
        snapshot.totals["grad_norm"],
        np.linalg.norm(every.astype(np.float64)),
        rtol=1e-5,
    )
    histograms = optimizer.histogram_snapshot()
    counts, low, high = reference_histogram(dense, 7)
    np.testing.assert_array_equal(histograms.grad_counts[0], counts)
    np.testing.assert_allclose(histograms.grad_range[0], [low, high], rtol=1e-6)


def test_clipping_indexed_slices_uses_the_dense_norm():
    optimizer = _monitored(clipping={"method": "global_norm", "max_norm": 1e-3})
    _, grads, _ = _custom_loop(optimizer, steps=1)
    every = np.concatenate([np.ravel(tf.convert_to_tensor(g)) for g in grads])
    norm = np.linalg.norm(every.astype(np.float64))
    totals = optimizer.snapshot().totals
    np.testing.assert_allclose(totals["clip_pre_norm"], norm, rtol=1e-5)
    np.testing.assert_allclose(totals["clip_post_norm"], 1e-3, rtol=1e-6)
    assert totals["clip_fraction"] == 1.0


def test_unknown_static_shape_from_input_signature():
    variable = keras.Variable(np.ones([3, 4], "float32"), name="kernel")
    optimizer = _monitored(
        skip_nonfinite=True, clipping={"method": "global_norm", "max_norm": 1.0}
    )
    plain = keras.Variable(np.ones([3, 4], "float32"), name="kernel")
    reference = keras.optimizers.Adam(0.05)
    spec = [tf.TensorSpec([None, None], tf.float32)]

    @tf.function(input_signature=spec)
    def apply(grad):
        optimizer.apply_gradients([(grad, variable)])

    @tf.function(input_signature=spec)
    def apply_plain(grad):
        clipped, _ = tf.clip_by_global_norm([grad], 1.0)
        reference.apply_gradients([(clipped[0], plain)])

    grad = np.arange(12, dtype="float32").reshape(3, 4) / 10 - 0.3
    grad[1, 2] = 0.0
    for _ in range(2):
        apply(tf.constant(grad))
        apply_plain(tf.constant(grad))
    np.testing.assert_array_equal(variable.numpy(), plain.numpy())
    snapshot = optimizer.snapshot()
    _assert_close(dict(zip(COLUMNS, snapshot.grad[0])), grad)
    assert snapshot.totals["skipped_steps"] == 0
    np.testing.assert_allclose(
        snapshot.totals["clip_pre_norm"],
        np.linalg.norm(grad.astype(np.float64)),
        rtol=1e-6,
    )

    grad[0, 0] = np.nan  # skipped: the weights stay
    kept = variable.numpy()
    apply(tf.constant(grad))
    np.testing.assert_array_equal(variable.numpy(), kept)
    snapshot = optimizer.snapshot()
    assert snapshot.totals["skipped_steps"] == 1
    assert snapshot.grad[0, COLUMNS.index("nonfinite")] == 1


_RULES = [
    GlobalNormClip(max_norm=0.5),
    AutoClip(percentile=50.0, history=4),
    ZClip(warmup=1),
    AdaptiveGradientClip(clipping=0.01),
]


@pytest.mark.parametrize("rule", _RULES, ids=lambda rule: rule.name)
def test_rules_clip_indexed_slices_as_their_dense_tensor(rule):
    table = tf.Variable(np.linspace(-1.0, 1.0, 12, dtype="float32").reshape(6, 2))
    sparse = tf.IndexedSlices(
        tf.constant([[3.0, -1.0], [0.5, 2.0], [-3.0, 1.0]]),
        tf.constant([4, 1, 4], tf.int64),
        tf.constant([6, 2], tf.int64),
    )
    state = {
        name: tf.fill(shape, tf.cast(initial, dtype))
        for name, (shape, dtype, initial) in rule.state_spec().items()
    }

    @tf.function(autograph=False)
    def clip(slices):  # the dense shape is a tensor here
        norm = global_norm_of([as_gradient(slices)])
        result = rule.clip([slices], [table], norm, state)
        return norm.exact, result.grads[0], result.post_norm

    norm, clipped, post_norm = clip(sparse)
    dense = tf.convert_to_tensor(sparse)
    np.testing.assert_array_equal(dense[4], [0.0, 0.0])  # duplicates cancel
    want = rule.clip([dense], [table], global_norm_of([dense]), state)
    np.testing.assert_allclose(float(norm), np.linalg.norm(dense), rtol=1e-7)
    kept = rule.name != "agc"  # AGC's units span rows: it clips dense
    assert isinstance(clipped, tf.IndexedSlices) == kept
    np.testing.assert_allclose(tf.convert_to_tensor(clipped), want.grads[0], rtol=1e-6)
    np.testing.assert_allclose(post_norm, want.post_norm, rtol=1e-6)


def test_weights_of_unknown_shape():
    values = np.array([[0.0, 1.5, -2.0], [4.0, 0.0, 0.25]], "float32")
    variable = tf.Variable(values, shape=tf.TensorShape(None), name="w")
    config = MonitorConfig(
        every_n_steps=1,
        histogram_every_n_steps=1,
        histogram_buckets=5,
        skip_nonfinite=True,
        clipping={"method": "global_norm", "max_norm": 1.0},
    )
    monitor = GradientMonitor(config)
    monitor.build([variable], make_tf_variable)

    @tf.function(input_signature=[tf.TensorSpec(None)], autograph=False)
    def step(grad):
        monitor.process(tf.constant(3), [grad], [0])

    grad = values[::-1] * 0.5
    step(tf.constant(grad))
    snapshot = monitor.snapshot()
    _assert_close(dict(zip(COLUMNS, snapshot.weight[0])), values)
    _assert_close(dict(zip(COLUMNS, snapshot.grad[0])), grad)
    histograms = monitor.histogram_snapshot()
    counts, low, high = reference_histogram(values, 5)
    np.testing.assert_array_equal(histograms.weight_counts[0], counts)
    np.testing.assert_allclose(histograms.weight_range[0], [low, high])
