"""The monitor's state as few variables as it takes (issue 31): each ring's
count folded into its steps variable, the skipped, step and clipped counts
in one, and the wrapper's unused base-class iteration count and learning
rate left out of `variables`. A store saved by the previous layout (Keras
saves optimizers by position) still loads, every value in its place; a
store of neither layout is refused by name."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_gradmon import GradientMonitorOptimizer

HISTORY = 4  # rows in each ring
CLIP_HISTORY = 3  # autoclip's buffer

#: The previous layout's variables after the inner optimizer's, in order,
#: with autoclip and histograms: the wrapper's base class's two, then the
#: monitor's state.
PREVIOUS = (
    "iteration",
    "learning_rate",
    "stats_count",
    "stats_steps",
    "stats_values",
    "skipped_steps",
    "clip_counts",
    "clip_buffer",
    "clip_count",
    "hist_count",
    "hist_steps",
    "hist_counts",
    "hist_ranges",
)


def _built(history: int = HISTORY) -> tuple[keras.Model, GradientMonitorOptimizer]:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1, momentum=0.9),
        every_n_steps=1,
        summary_history=history,
        histogram_buckets=5,
        clipping={"method": "autoclip", "history": CLIP_HISTORY},
    )
    optimizer.build(model.trainable_variables)
    return model, optimizer


def _own(optimizer: GradientMonitorOptimizer) -> list:
    return optimizer.variables[len(optimizer.inner_optimizer.variables) :]


def _previous_store(optimizer: GradientMonitorOptimizer) -> tuple[dict, dict]:
    """A store of the previous layout, by hand: `(store, {name: value})`
    with known values (rings of 6 and 2 rows pushed)."""
    rng = np.random.default_rng(0)
    state = optimizer.monitor.state
    values_shape = tuple(state.scalars.payloads[0].shape)
    counts_shape, ranges_shape = (tuple(p.shape) for p in state.histograms.payloads)
    old = {
        "iteration": np.int64(99),  # the base class's: unused, dropped
        "learning_rate": np.float32(7.0),
        "stats_count": np.int64(6),  # slots 0, 1 hold steps 4, 5
        "stats_steps": np.array([4, 5, 2, 3], np.int64),
        "stats_values": rng.normal(size=values_shape).astype(np.float32),
        "skipped_steps": np.int64(3),
        "clip_counts": np.array([7, 2], np.int64),
        "clip_buffer": np.array([0.5, 0.25, 0.125], np.float32),
        "clip_count": np.int64(11),
        "hist_count": np.int64(2),
        "hist_steps": np.array([0, 4, -1, -1], np.int64),
        "hist_counts": rng.integers(0, 9, size=counts_shape).astype(np.int32),
        "hist_ranges": rng.normal(size=ranges_shape).astype(np.float32),
    }
    assert tuple(old) == PREVIOUS
    inner = [np.asarray(v) + 0.5 for v in optimizer.inner_optimizer.variables]
    inner[0] = np.int64(8)  # the inner optimizer's iteration count
    values = inner + list(old.values())
    return {str(i): v for i, v in enumerate(values)}, {"inner": inner, **old}


def test_the_state_is_six_variables_at_the_defaults():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.1))
    optimizer.build(model.trainable_variables)
    names = [v.name for v in _own(optimizer)]
    assert names == [
        "stats_index",
        "stats_values",
        "step_counts",
        "hist_index",
        "hist_counts",
        "hist_ranges",
    ]
    assert names == list(optimizer.monitor.state.variables)
    shapes = [tuple(v.shape) for v in _own(optimizer)]
    assert [shapes[k] for k in (0, 2, 3)] == [(33,), (3,), (33,)]  # 32 rows
    inner = optimizer.inner_optimizer.variables
    assert optimizer.variables[: len(inner)] == inner


def test_a_store_of_the_previous_layout_loads_every_value_in_its_place():
    model, optimizer = _built()
    store, old = _previous_store(optimizer)
    optimizer.load_own_variables(store)

    for variable, want in zip(optimizer.inner_optimizer.variables, old["inner"]):
        np.testing.assert_array_equal(variable.numpy(), want, variable.path)
    state = {v.name: v.numpy() for v in _own(optimizer)}
    assert list(state) == [
        "stats_index",
        "stats_values",
        "step_counts",
        "clip_buffer",
        "clip_count",
        "hist_index",
        "hist_counts",
        "hist_ranges",
    ]
    assert state["stats_index"].tolist() == [6, 4, 5, 2, 3]
    assert state["step_counts"].tolist() == [3, 7, 2]
    assert state["hist_index"].tolist() == [2, 0, 4, -1, -1]
    assert state["clip_count"] == 11
    for name in ("stats_values", "clip_buffer", "hist_counts", "hist_ranges"):
        np.testing.assert_array_equal(state[name], old[name], name)

    # The host readers find the newest rows (slot 1 of each ring).
    snapshot = optimizer.snapshot()
    assert snapshot.step == 5
    np.testing.assert_array_equal(snapshot.values, old["stats_values"][1])
    histograms = optimizer.histogram_snapshot()
    assert histograms.step == 4
    rows = len(optimizer.monitor.paths)
    np.testing.assert_array_equal(histograms.grad_counts, old["hist_counts"][1][:rows])
    assert optimizer.monitor.state.counts() == (6, 2)

    # The next step (8, the inner count loaded) pushes after the loaded rows.
    grads = [np.ones(v.shape, np.float32) for v in model.trainable_variables]
    optimizer.apply(grads, model.trainable_variables)
    steps = optimizer.monitor.state.scalars.steps.numpy()
    assert steps.tolist() == [7, 4, 5, 8, 3]
    assert optimizer.snapshot().step == 8
    assert optimizer.snapshot().totals["skipped_steps"] == 3


def test_a_store_of_the_current_layout_round_trips():
    model, optimizer = _built()
    grads = [np.ones(v.shape, np.float32) for v in model.trainable_variables]
    for _ in range(3):
        optimizer.apply(grads, model.trainable_variables)
    store: dict = {}
    optimizer.save_own_variables(store)
    assert len(store) == len(optimizer.variables)

    _, restored = _built()
    restored.load_own_variables(store)
    for a, b in zip(optimizer.variables, restored.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), a.path)
    assert restored.monitor.state.counts() == (3, 1)  # histograms at step 0


def test_a_store_of_neither_layout_is_refused_by_its_size():
    _, optimizer = _built()
    store, _ = _previous_store(optimizer)
    store[str(len(store))] = np.zeros(2)  # one variable too many
    with pytest.raises(ValueError, match="Received: a store of 18 variables"):
        optimizer.load_own_variables(store)


def test_a_previous_store_of_other_options_is_refused_by_the_variable():
    _, optimizer = _built()
    store, _ = _previous_store(optimizer)
    _, longer = _built(history=HISTORY + 1)
    with pytest.raises(ValueError, match=r"`stats_index` has shape \(5,\); this "):
        longer.load_own_variables(store)


def test_a_store_without_monitor_state_is_skipped_as_keras_does():
    _, optimizer = _built()
    before = [v.numpy() for v in optimizer.variables]
    # What an optimizer saved before its first step held (the previous
    # layout: the inner optimizer's two, the base class's two).
    store = {str(i): np.float32(5.0) for i in range(4)}
    with pytest.warns(UserWarning, match="Skipping variable loading"):
        optimizer.load_own_variables(store)
    for variable, value in zip(optimizer.variables, before):
        np.testing.assert_array_equal(variable.numpy(), value)
