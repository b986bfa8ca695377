import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_gradmon
from keras_gradmon import GradientMonitorOptimizer, MonitorConfig
from keras_gradmon.columns import COLUMNS
from keras_gradmon.core.monitor import GradientMonitor
from tests.conftest import compile_fn
from tests.helpers import LOSS, data, gradients, mlp
from tests.reference import (
    assert_statistics_close,
    load_events,
    reference_statistics,
)

#: Eager and tf.function only, for tests whose XLA case would trace the same
#: graph as tf.function: what they check is decided in Python while tracing
#: (which gradients exist, the callable frequency's predicate, the rows each
#: variable gets). XLA's compile of the statistics (non-finite elements
#: too), histograms, densified `IndexedSlices` and the global norm is
#: checked in tests/stats (the `xla` cases of test_batched.py and
#: test_norms.py) and, in the monitored step, by the tests here that keep
#: all three modes.
NOT_XLA = pytest.mark.parametrize("mode", ["eager", "function"])


def _step_fn(model, optimizer, mode):
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = LOSS(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    return compile_fn(step, mode)


def _train(model, optimizer, mode, steps, x, y):
    fn = _step_fn(model, optimizer, mode)
    for i in range(steps):
        fn(x[i * 16 : (i + 1) * 16], y[i * 16 : (i + 1) * 16])


def test_weights_bit_identical_to_unwrapped(mode):
    # One plain run against the monitor without histograms (their code left
    # out of the step) and with them every 2 steps (both branches).
    x, y = data(n=128)
    plain, plain_opt = mlp(), keras.optimizers.Adam(1e-2)
    _train(plain, plain_opt, mode, 6, x, y)
    for histograms in (None, 2):
        monitored = mlp()
        wrapped = GradientMonitorOptimizer(
            keras.optimizers.Adam(1e-2),
            every_n_steps=1,
            histogram_every_n_steps=histograms,
            groups={"hidden": "hidden"},
        )
        _train(monitored, wrapped, mode, 6, x, y)
        for a, b in zip(plain.get_weights(), monitored.get_weights()):
            np.testing.assert_array_equal(a, b, err_msg=f"{histograms=}")
        for a, b in zip(plain_opt.variables, wrapped.inner_optimizer.variables):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert int(wrapped.iterations.numpy()) == 6
        assert wrapped.snapshot().step == 5


def test_statistics_of_the_applied_gradients(mode):
    x, y = data(n=16)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1), every_n_steps=1, groups={"head": "head"}
    )
    expected_grads = gradients(model, x, y)
    weights = [w.copy() for w in model.get_weights()]
    _train(model, optimizer, mode, 1, x, y)
    snapshot = optimizer.snapshot()
    assert snapshot.step == 0
    assert snapshot.paths == tuple(v.path for v in model.trainable_variables)
    for i, g in enumerate(expected_grads):
        got = dict(zip(COLUMNS, snapshot.grad[i]))
        assert_statistics_close(got, reference_statistics(g), rtol=1e-5)
        assert_statistics_close(
            dict(zip(COLUMNS, snapshot.weight[i])), reference_statistics(weights[i])
        )
    all_grads = np.concatenate([g.ravel() for g in expected_grads]).astype(np.float64)
    np.testing.assert_allclose(
        snapshot.totals["grad_norm"], np.linalg.norm(all_grads), rtol=1e-5
    )
    head = np.concatenate([g.ravel() for g in expected_grads[2:]]).astype(np.float64)
    np.testing.assert_allclose(
        snapshot.group_grad_norm[0], np.linalg.norm(head), rtol=1e-5
    )
    all_weights = np.concatenate([w.ravel() for w in weights]).astype(np.float64)
    np.testing.assert_allclose(
        snapshot.totals["weight_norm"], np.linalg.norm(all_weights), rtol=1e-6
    )


def test_frequency_gates_statistics_and_histograms(mode):
    x, y = data(n=160)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1), every_n_steps=3, histogram_every_n_steps=4
    )
    seen = []
    step = _step_fn(model, optimizer, mode)
    for i in range(10):
        step(x[16 * i : 16 * (i + 1)], y[16 * i : 16 * (i + 1)])
        seen.append((optimizer.snapshot().step, optimizer.histogram_snapshot().step))
    assert [s for s, _ in seen] == [0, 0, 0, 3, 3, 3, 6, 6, 6, 9]
    assert [h for _, h in seen] == [0, 0, 0, 0, 4, 4, 4, 4, 8, 8]


@NOT_XLA
def test_callable_frequency(mode):
    x, y = data(n=160)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1),
        every_n_steps=lambda step: tf.logical_and(step >= 2, step % 2 == 1),
        histogram_every_n_steps=None,
    )
    steps = []
    step = _step_fn(model, optimizer, mode)
    for i in range(7):
        step(x[16 * i : 16 * (i + 1)], y[16 * i : 16 * (i + 1)])
        steps.append(optimizer.snapshot().step)
    assert steps == [-1, -1, -1, 3, 3, 5, 5]


@NOT_XLA
def test_histograms_count_every_element(mode):
    x, y = data(n=16)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1),
        every_n_steps=1,
        histogram_every_n_steps=1,
        histogram_buckets=7,
    )
    expected_grads = gradients(model, x, y)
    weights = model.get_weights()
    _train(model, optimizer, mode, 1, x, y)
    hist = optimizer.histogram_snapshot()
    assert hist.grad_counts.shape == (4, 7)
    for i, g in enumerate(expected_grads):
        assert hist.grad_counts[i].sum() == g.size
        assert hist.weight_counts[i].sum() == weights[i].size
        np.testing.assert_allclose(hist.grad_range[i], [g.min(), g.max()], rtol=1e-5)


@NOT_XLA
def test_none_gradients_are_skipped_and_counted(mode):
    keras.utils.set_random_seed(0)
    used = keras.Variable(np.ones([3], "float32"), name="used")
    unused = keras.Variable(np.ones([2], "float32"), name="unused")
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.5), every_n_steps=1)

    def step():
        optimizer.apply([tf.constant([1.0, 2.0, 2.0]), None], [used, unused])

    with pytest.warns(UserWarning, match="Gradients do not exist"):
        compile_fn(step, mode)()
    snapshot = optimizer.snapshot()
    assert snapshot.totals["grad_missing"] == 1
    assert snapshot.totals["grad_norm"] == 3.0
    assert snapshot.has_grad.tolist() == [True, False]
    assert np.isnan(snapshot.grad[1, COLUMNS.index("norm")])
    np.testing.assert_array_equal(used.numpy(), [0.5, 0.0, 0.0])
    np.testing.assert_array_equal(unused.numpy(), [1.0, 1.0])


@NOT_XLA
def test_embedding_gradients_give_dense_statistics(mode):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((3,), dtype="int32"),
            keras.layers.Embedding(10, 4),
            keras.layers.Flatten(),
            keras.layers.Dense(1),
        ]
    )
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.1), every_n_steps=1)
    ids = tf.constant([[1, 2, 1], [3, 3, 3]])

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(ids))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return grads[0]

    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(ids))
    sparse = tape.gradient(loss, model.trainable_variables)[0]
    assert isinstance(sparse, tf.IndexedSlices)
    dense = tf.convert_to_tensor(sparse)
    compile_fn(step, mode)()
    got = dict(zip(COLUMNS, optimizer.snapshot().grad[0]))
    assert_statistics_close(got, reference_statistics(dense.numpy()), rtol=1e-6)
    assert got["zero_fraction"] == pytest.approx(7 / 10)  # rows 1, 2, 3 used


@NOT_XLA
def test_nonfinite_gradients_are_counted_and_do_not_crash(mode):
    v = keras.Variable(np.ones([4], "float32"), name="v")
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.5), every_n_steps=1)
    grad = tf.constant([np.nan, np.inf, 3.0, 4.0])
    compile_fn(lambda: optimizer.apply([grad], [v]), mode)()
    snapshot = optimizer.snapshot()
    assert snapshot.totals["grad_nonfinite"] == 2
    assert snapshot.totals["grad_norm"] == 5.0  # of the finite elements


def test_model_fit_under_xla_matches_unwrapped_and_traces_once(tmp_path, monkeypatch):
    traces = []
    measure = GradientMonitor.measure_holding
    # Python runs `measure_holding` (what `measure` and `process` run) only
    # while TensorFlow traces the step.
    monkeypatch.setattr(
        GradientMonitor,
        "measure_holding",
        lambda self, *a, **k: traces.append(1) or measure(self, *a, **k),
    )
    x, y = data(n=128)
    plain, monitored = mlp(), mlp()
    plain.compile(keras.optimizers.Adam(1e-2), LOSS, jit_compile=True)
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-2), every_n_steps=2, histogram_every_n_steps=3
    )
    monitored.compile(optimizer, LOSS, jit_compile=True)
    plain.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
    monitored.fit(
        x,
        y,
        batch_size=16,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[keras.callbacks.TensorBoard(str(tmp_path))],
    )
    traced = len(traces)
    assert traced >= 1
    monitored.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert len(traces) == traced  # 16 more steps, no new trace
    for a, b in zip(plain.get_weights(), monitored.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert monitored.jit_compile is True
    assert optimizer.snapshot().step == 22
    assert optimizer.histogram_snapshot().step == 21
    # Keras's own TensorBoard callback still finds the learning rate.
    events = load_events(str(tmp_path / "train"))
    assert "epoch_learning_rate" in events.Tags()["tensors"]


def test_delegates_learning_rate_and_iterations():
    inner = keras.optimizers.Adam(0.25)
    optimizer = GradientMonitorOptimizer(inner)
    assert float(optimizer.learning_rate.numpy()) == 0.25
    optimizer.learning_rate = 0.5
    assert float(inner.learning_rate.numpy()) == 0.5
    assert optimizer.iterations is inner.iterations


def test_config_and_options():
    config = MonitorConfig(every_n_steps=7)
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(), config=config, histogram_buckets=12
    )
    assert optimizer.monitor_config.every_n_steps == 7
    assert optimizer.monitor_config.histogram_buckets == 12
    from_dict = GradientMonitorOptimizer(
        keras.optimizers.SGD(), config={"every_n_steps": 3}
    )
    assert from_dict.monitor_config.every_n_steps == 3


def test_save_and_load_round_trip(tmp_path):
    x, y = data(n=64)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-2),
        every_n_steps=2,
        groups={"head": "head"},
        tag_scope="actor",
    )
    model.compile(optimizer, LOSS)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    restored = loaded.optimizer
    assert isinstance(restored, GradientMonitorOptimizer)
    assert isinstance(restored.inner_optimizer, keras.optimizers.Adam)
    assert restored.monitor_config == optimizer.monitor_config
    assert len(restored.variables) == len(optimizer.variables)
    for a, b in zip(optimizer.variables, restored.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert int(restored.iterations.numpy()) == 4
    # Training continues identically after loading.
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    loaded.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_callable_frequency_cannot_be_saved():
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(), every_n_steps=lambda s: s > 0
    )
    with pytest.raises(
        ValueError, match="callable `every_n_steps` cannot be serialized"
    ):
        optimizer.get_config()


@pytest.mark.parametrize(
    "inner",
    [None, "adam", tf.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)],
)
def test_rejects_what_is_not_a_keras_optimizer(inner):
    with pytest.raises(
        ValueError, match="`inner_optimizer` must be a Keras 3 optimizer"
    ):
        GradientMonitorOptimizer(inner)


def test_group_matching_no_variable_fails_at_build():
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(), groups={"critic": "critic/.*"}
    )
    with pytest.raises(
        ValueError, match="Group 'critic' of `groups` matches no variable"
    ):
        optimizer.build(model.trainable_variables)


def test_snapshot_before_build_is_a_clear_error():
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD())
    with pytest.raises(ValueError, match="has recorded nothing yet"):
        optimizer.snapshot()


def test_public_api():
    assert set(keras_gradmon.__all__) >= {
        "GradientMonitorOptimizer",
        "MonitorConfig",
        "GradientSummaryCallback",
        "write_summaries",
        "watch",
        "GradientMonitorCallback",
        "AlertOptions",
    }
    for name in keras_gradmon.__all__:
        assert getattr(keras_gradmon, name) is not None
