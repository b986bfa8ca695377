"""`ActivationMonitor` and `ActivationMonitorCallback` on Keras 3's JAX
backend: the probe reads the trainer's live state during `fit`, its numbers
match NumPy float64 references of the model's own outputs and the
TensorFlow backend's, and TensorFlow is never imported."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

import keras_gradmon
from keras_gradmon.activations.probe import ACTIVATION_STATISTICS
from keras_gradmon.callbacks import live_optimizer_step
from tests.activations import models
from tests.activations.models import reference_statistics
from tests.jax import activations_side as side
from tests.jax.processes import run_python
from tests.jax.test_no_tensorflow import _TRACED
from tests.reference import (
    histogram_series,
    load_events,
    reference_histogram,
    scalar_series,
)

WATCHED = {"relu": "relu", "squash": "tanh", "gate": "sigmoid"}
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _model() -> keras.Model:
    model = side.probe_net()
    model.set_weights(side.weights(model))
    return model


class _Reference(keras.callbacks.Callback):
    """Runs after the activation callback. At every batch: the step the
    count in the trainer's live state gives; at each step the callback
    measured: the watched layers' outputs on the probe batch, from the
    model's own forward pass (the trainer's state synced into the variables
    first, as Keras lets callbacks do)."""

    def __init__(self, callback, probe: np.ndarray) -> None:
        super().__init__()
        self.callback, self.probe = callback, probe
        self.steps: list[int] = []
        self.outputs: dict[int, dict[str, np.ndarray]] = {}

    def on_train_batch_begin(self, batch, logs=None):
        self.steps.append(live_optimizer_step(self.model.optimizer, self.model))
        latest = self.callback.monitor.latest
        if latest is None or latest.step in self.outputs:
            return
        self.model.jax_state_sync()
        watched = [self.model.get_layer(name) for name in WATCHED]
        layers = keras.Model(self.model.inputs[0], [w.output for w in watched])
        outputs = layers(self.probe, training=False)
        self.outputs[latest.step] = {
            f"probe_net/{name}": np.asarray(y) for name, y in zip(WATCHED, outputs)
        }


def _fit(optimizer, callbacks, epochs: int = 2) -> keras.Model:
    model = _model()
    model.compile(optimizer, LOSS)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(32, 8, 8, 3)).astype("float32")
    y = rng.integers(0, 3, 32).astype("int32")
    model.fit(
        x, y, batch_size=8, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks
    )
    return model


def _assert_event_matches(events, layer: str, step: int, y: np.ndarray) -> None:
    expected = reference_statistics(y, WATCHED[layer.split("/")[-1]])
    tolerance = 2e-6 * max(1.0, abs(expected["max"]), abs(expected["min"]))
    tags = set(events.Tags()["tensors"])
    for name in ACTIVATION_STATISTICS:
        tag = f"activation_{name}/{layer}"
        if name not in expected:
            assert tag not in tags, tag
            continue
        assert scalar_series(events, tag)[step] == pytest.approx(
            expected[name], abs=tolerance
        ), (layer, name, step)
    counts, low, high = reference_histogram(y, side.BUCKETS)
    rows = histogram_series(events, f"activation_hist/{layer}")[step]
    assert rows[:, 2].tolist() == counts.tolist(), (layer, step)
    # The edges are rounded (`histogram_rows.readable_rows`): outward at the ends, by at
    # most a tenth of a bucket.
    width = (high - low) / side.BUCKETS
    assert rows[0, 0] <= low and rows[-1, 1] >= high
    assert [rows[0, 0], rows[-1, 1]] == pytest.approx([low, high], abs=0.1 * width)


@pytest.mark.parametrize("monitored", [False, True], ids=["adam", "monitored"])
def test_fit_measures_the_live_model(monitored, tmp_path):
    log_dir = str(tmp_path)
    probe = side.probe_batch()
    optimizer = keras.optimizers.Adam(0.05)
    callback = keras_gradmon.ActivationMonitorCallback(
        probe, log_dir=log_dir, every_n_steps=3, histogram_buckets=side.BUCKETS
    )
    reference = _Reference(callback, probe)
    callbacks = [callback, reference]
    if monitored:
        optimizer = keras_gradmon.GradientMonitorOptimizer(optimizer, every_n_steps=3)
        callbacks.append(keras_gradmon.GradientSummaryCallback(log_dir))
    _fit(optimizer, callbacks)
    # 4 batches an epoch: steps 6 and 7 read the count from the live state.
    assert reference.steps == list(range(8))
    assert sorted(reference.outputs) == [0, 3, 6]
    events = load_events(log_dir)
    for step, outputs in reference.outputs.items():
        for layer, y in outputs.items():
            _assert_event_matches(events, layer, step, y)
    # `relu` has no variables: its path is where it was called.
    dead = scalar_series(events, "activation_dead_fraction/probe_net/relu")
    assert dead == {s: len(side.DEAD) / 8 for s in (0, 3, 6)}
    assert callback.monitor.latest.dead_units["probe_net/relu"].tolist() == side.DEAD
    # Training moved the weights and the BatchNorm statistics: step 6
    # describes the model as it then was, not as it began.
    std = scalar_series(events, "activation_std/probe_net/squash")
    assert std[6] != pytest.approx(std[0], rel=1e-3)
    saturated = scalar_series(events, "activation_saturated_fraction/probe_net/gate")
    assert 0 < saturated[0] < 1
    if monitored:
        assert scalar_series(events, "grad_norm/global").keys() == {0, 3, 6}


@pytest.mark.parametrize("kind", sorted(models.BUILDERS))
def test_sequential_functional_and_subclassed_models(kind):
    build, activations = models.BUILDERS[kind]
    model, x = build(), models.probe_data()
    traces = []

    def forward(batch):
        traces.append(1)
        return model(batch, training=False)

    monitor = keras_gradmon.ActivationMonitor(
        model, x, histogram_buckets=12, forward=forward
    )
    first = monitor.record(0)
    assert dict(zip(first.layers, first.activations)) == activations
    models.assert_snapshot_matches(first, model, x)
    # New weights: the compiled probe reads the variables' values anew.
    rng = np.random.default_rng(0)
    model.set_weights([w + rng.normal(0, 0.3, w.shape) for w in model.get_weights()])
    second = monitor.record(1)
    models.assert_snapshot_matches(second, model, x)
    assert not np.allclose(first.stats[:, :2], second.stats[:, :2])
    assert len(traces) == 1
    hooked = [layer for layer in model._flatten_layers() if "call" in vars(layer)]
    assert not hooked
    if kind != "functional":
        assert first.dead_units[models.H1[kind]].tolist() == models.DEAD


def test_a_hand_written_loop_passes_its_state():
    # A jax.jit loop threads the values; the variables keep the old ones.
    model, x = models.sequential(), models.probe_data()
    monitor = keras_gradmon.ActivationMonitor(model, x, histogram_buckets=12)
    rng = np.random.default_rng(1)
    trainable = [
        v.value + rng.normal(0, 0.3, v.shape).astype("float32")
        for v in model.trainable_variables
    ]
    non_trainable = [v.value for v in model.non_trainable_variables]
    snapshot = monitor.update(0, state=(trainable, non_trainable))
    before = monitor.record(1)
    for variable, value in zip(model.trainable_variables, trainable):
        variable.assign(value)
    models.assert_snapshot_matches(snapshot, model, x)
    assert not np.allclose(before.stats[:, :2], snapshot.stats[:, :2])


def test_variables_without_values_are_a_clear_error():
    # As during another model's `fit`: the trainer purges the variables.
    model = models.sequential()
    monitor = keras_gradmon.ActivationMonitor(model, models.probe_data(8))
    model._purge_model_variables(trainable_variables=True)
    with pytest.raises(ValueError, match=r"'seq' hold no values.*pass `state=`"):
        monitor.record(0)


def test_parity_with_tensorflow_backend(tmp_path):
    model, probe = _model(), side.probe_batch()
    source, target = tmp_path / "in.npz", tmp_path / "out.npz"
    weights = {f"w{i}": w for i, w in enumerate(model.get_weights())}
    np.savez(source, probe=probe, **weights)
    run_python(
        ["-m", "tests.jax.activations_side", str(source), str(target)], "tensorflow"
    )
    with np.load(target) as saved:
        theirs = dict(saved)
    ours = side.measure(model, probe)
    assert sorted(ours) == sorted(theirs)
    assert ours["layers"].tolist() == [f"probe_net/{name}" for name in WATCHED]
    for key in ("reached", *(k for k in ours if k.startswith("dead/"))):
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    assert ours["dead/probe_net/relu"].tolist() == side.DEAD
    np.testing.assert_allclose(ours["ranges"], theirs["ranges"], rtol=1e-5)
    _assert_counts_match(ours, theirs, _outputs(model, probe))
    _assert_statistics_close(ours["stats"], theirs["stats"])


def _outputs(model: keras.Model, probe: np.ndarray) -> list[np.ndarray]:
    """The watched layers' outputs on `probe`, from this backend's forward
    pass, flattened."""
    watched = [model.get_layer(name).output for name in WATCHED]
    outputs = keras.Model(model.inputs[0], watched)(probe, training=False)
    return [keras.ops.convert_to_numpy(o).ravel() for o in outputs]


def _assert_counts_match(ours: dict, theirs: dict, outputs: list) -> None:
    """The bucket counts of each layer equal, but for the elements within
    2e-5 of the layer's largest magnitude from a bucket edge: each backend
    computes the outputs in a program of its own (TensorFlow's oneDNN
    convolution, XLA's), which round differently, and the edges follow the
    extremes (equal within 1e-5), so such an element may land on either
    side of its edge; every element is counted on both."""
    for i, values in enumerate(outputs):
        mine, other = ours["counts"][i], theirs["counts"][i]
        assert mine.sum() == other.sum() == np.isfinite(values).sum(), WATCHED
        low, high = ours["ranges"][i].astype(np.float64)
        edges = low + (high - low) * np.arange(1, side.BUCKETS) / side.BUCKETS
        slack = 2e-5 * max(abs(low), abs(high))
        near = [int((np.abs(values - edge) <= slack).sum()) for edge in edges]
        moved = np.abs(np.cumsum(mine.astype(np.int64) - other))[:-1]
        assert (moved <= near).all(), (list(WATCHED)[i], moved.tolist(), near)


def _assert_statistics_close(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Every statistic within 1e-5 relative, a mean within 1e-5 of its
    layer's largest magnitude (a float32 sum that cancels is as exact as its
    summation order, which differs between the backends)."""
    columns = list(ACTIVATION_STATISTICS)
    mean = columns.index("mean")
    scale = np.maximum(
        np.abs(theirs[:, columns.index("min")]), np.abs(theirs[:, columns.index("max")])
    )
    np.testing.assert_allclose(
        ours[:, mean], theirs[:, mean], rtol=0, atol=1e-5 * scale.max()
    )
    rest = [c for c in range(len(columns)) if c != mean]
    np.testing.assert_allclose(ours[:, rest], theirs[:, rest], rtol=1e-5)
    # NaN where a statistic does not apply (relu saturation), on both sides.
    assert np.isnan(ours).tolist() == np.isnan(theirs).tolist()


_FIT = """
import keras, numpy as np
import keras_gradmon
from tests.jax import activations_side as side
model = side.probe_net()
model.set_weights(side.weights(model))
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
callback = keras_gradmon.ActivationMonitorCallback(
    side.probe_batch(), log_dir=LOG_DIR, every_n_steps=2, histogram_buckets=4)
x = side.probe_batch(16, seed=3)
model.fit(x, np.zeros(16, "int32"), batch_size=4, epochs=2, verbose=0,
          callbacks=[callback])
steps = callback.monitor.latest.step
"""


def test_the_jax_path_never_imports_tensorflow(tmp_path):
    report = "\nprint(json.dumps([importers, 'tensorflow' in sys.modules, steps]))"
    code = _TRACED + _FIT.replace("LOG_DIR", repr(str(tmp_path))) + report
    importers, imported, last = json.loads(
        run_python(["-c", code], "jax").splitlines()[-1]
    )
    ours = [f for f in importers if "keras_gradmon" in f]
    assert not imported, ours or importers
    assert last == 6
    assert scalar_series(
        load_events(str(tmp_path)), "activation_std/probe_net/squash"
    ).keys() == {0, 2, 4, 6}
