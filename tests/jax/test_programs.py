"""The two programs of `fit` on JAX (`keras_gradmon.programs`): a step with
nothing due compiles to the unwrapped step, with no copy of a weight; the
one that measures copies the weights its untaken branch reads. Checked on
XLA's optimized HLO, as jitted by Keras's trainer (`donate_argnums=0`)."""

import re
import threading
import time

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest

import keras_gradmon
from keras_gradmon.backend.jax import Aside, LeanStep
from keras_gradmon.programs import Programs
from keras_gradmon.schedule import measuring
from tests.reference import load_events, scalar_series

WEIGHT_SHAPES = {"64,32", "32", "32,32", "32,4", "4"}


def _data():
    rng = np.random.default_rng(0)
    return rng.random((256, 64), np.float32), rng.integers(0, 4, 256)


def _model(optimizer):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
         keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)]
    )  # fmt: skip
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=True)
    return model


def _weight_copies(optimizer, measures=True) -> list[str]:
    """The weight-shaped `copy` instructions of the model's optimized train
    step, compiled as Keras's trainer jits it."""
    model = _model(optimizer)
    x, y = _data()
    model.fit(x[:32], y[:32], batch_size=32, verbose=0)  # builds the state
    state = model._get_jax_state(
        trainable_variables=True,
        non_trainable_variables=True,
        optimizer_variables=True,
        metrics_variables=True,
    )
    with measuring(measures):
        # A function of its own: JAX would reuse `fit`'s trace of the bound
        # `train_step` (see `programs._function`).
        step = jax.jit(lambda *args: model.train_step(*args), donate_argnums=0)
        text = step.lower(state, (x[:32], y[:32])).compile().as_text()
    shapes = re.findall(r"= f32\[([0-9,]*)\]\{[^}]*\} copy\(", text)
    return sorted(s for s in shapes if s in WEIGHT_SHAPES)


def test_a_step_with_nothing_due_copies_no_weight_the_unwrapped_step_does_not():
    plain = _weight_copies(keras.optimizers.Adam(1e-2))

    def wrapped():
        return keras_gradmon.GradientMonitorOptimizer(keras.optimizers.Adam(1e-2))

    idle = _weight_copies(wrapped(), measures=False)
    measuring_copies = _weight_copies(wrapped())
    assert idle == plain
    # The check can fail: the measuring program's untaken branch reads the
    # donated weights, and XLA copies each of them.
    assert sorted(set(measuring_copies)) == sorted(WEIGHT_SHAPES)


def _plain_and_monitored(log_dir, epochs: int) -> tuple:
    """The data, a plain model fitted `epochs` epochs, and a model of the
    same weights monitored every 5 steps, with its callback (not fitted)."""
    x, y = _data()
    plain = _model(keras.optimizers.Adam(1e-2))
    plain.fit(x, y, batch_size=32, epochs=epochs, verbose=0)
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-2), every_n_steps=5
    )
    callback = keras_gradmon.GradientMonitorCallback(str(log_dir), alerts=False)
    return x, y, plain, _model(optimizer), callback


def test_fit_runs_the_idle_program_and_records_the_due_steps(tmp_path, monkeypatch):
    # From the second call (by default, once the run has lasted its compile).
    monkeypatch.setattr(Programs, "patience", 0.0)
    x, y, plain, model, callback = _plain_and_monitored(tmp_path, epochs=2)
    optimizer = model.optimizer
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[callback])
    # 16 steps: 0, 5, 10, 15 due: the measuring program at 0 (also
    # histograms; the first call, which measures the steps a batch takes),
    # the due one at 5, 10, 15; step 8, the second epoch's first, is idle.
    programs = Programs.made_for(model)
    assert programs.calls == {"measuring": 1, "due": 3, "idle": 12}
    assert programs.aside is None  # on the CPU: each compiled at its first call
    # The idle program takes none of the monitor's state arrays.
    inner = len(optimizer.inner_optimizer.variables)
    own = range(inner, len(optimizer.variables))
    assert sorted(programs.idle.lean_step.held) == list(own) and len(own) == 6
    # The due one holds the histograms' ring (it writes the statistics').
    names = [optimizer.variables[i].name for i in programs.due.lean_step.held]
    assert sorted(names) == ["hist_counts", "hist_index", "hist_ranges"]
    events = load_events(str(tmp_path))
    assert sorted(scalar_series(events, "grad_norm/global")) == [0, 5, 10, 15]
    for want, got in zip(plain.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)


def test_held_are_the_optimizer_variables_a_step_neither_reads_nor_changes():
    traces = []

    def step(state, data):
        traces.append(data.shape)
        trainable, non_trainable, (count, seen, passed, returned_twice), metrics = state
        logs = {"loss": seen.sum() + data, "twice": returned_twice}
        optimizer = [count + 1, seen, passed, returned_twice]
        return logs, (trainable, non_trainable, optimizer, metrics)

    def state():
        optimizer = [jnp.zeros(()), jnp.ones(3), jnp.ones((2, 2)), jnp.ones(4)]
        return [jnp.ones(5)], [], optimizer, [jnp.zeros(())]

    lean, before = LeanStep(step), state()
    logs, (_, _, after, _) = lean(before, jnp.ones(()))
    # Changed (0), read (1) and returned twice (3) are not held.
    assert lean.held == {2: jax.ShapeDtypeStruct((2, 2), jnp.float32)}
    assert after[2] is before[2][2]  # not passed to the program
    assert float(after[0]) == 1.0 and float(logs["loss"]) == 4.0
    # Compiled from the first call's trace; other shapes are traced anew.
    assert traces == [()]
    logs, _ = lean(state(), jnp.ones(2))
    assert traces == [(), (2,)] and logs["loss"].tolist() == [4.0, 4.0]


def test_the_idle_and_due_programs_compile_off_the_training_thread(
    tmp_path, monkeypatch
):
    """At the default patience the measuring program runs until the others
    are compiled, on a thread of their own (by default only where JAX
    computes on an accelerator): the steps after the switch compile nothing
    on the training thread, and record what they would."""
    monkeypatch.setattr(Programs, "compile_aside_on_cpu", True)
    compiles = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(threading.current_thread().name)

    x, y, plain, model, callback = _plain_and_monitored(tmp_path, epochs=3)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        model.fit(x, y, batch_size=32, verbose=0, callbacks=[callback])
        programs = Programs.made_for(model)
        assert programs.calls["idle"] == programs.calls["due"] == 0
        time.sleep(max(programs.idle_from - time.monotonic(), 0.0))
        first = len(compiles)
        # Asked at the first call: the thread starts; the steps go on measuring.
        model.fit(x, y, batch_size=32, verbose=0, callbacks=[callback])
        programs.aside.join()
        assert programs.aside.error is None
        before = dict(programs.calls)
        model.fit(x, y, batch_size=32, verbose=0, callbacks=[callback])
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    # Steps 16 to 23: 20 due, the rest idle but the fit's first call.
    calls = {k: v - before[k] for k, v in programs.calls.items()}
    assert calls == {"measuring": 1, "due": 1, "idle": 6}
    # The idle and due programs, each compiled once, neither on this thread.
    assert compiles[first:] == ["keras_gradmon-compile"] * 2
    events = load_events(str(tmp_path))
    assert sorted(scalar_series(events, "grad_norm/global")) == [0, 5, 10, 15, 20]
    for want, got in zip(plain.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)


def test_a_compile_aside_that_fails_leaves_it_to_the_first_call():
    def step(state, data):
        if data.shape == (3,):
            raise ValueError("no batch of 3")
        return {"loss": data.sum()}, state

    lean = LeanStep(step)

    def function(state, batches):
        return lean(state, next(batches))

    function.lean_step = lean
    aside = Aside([function])
    state = ([jnp.ones(2)], [], [jnp.zeros(())], [])
    assert aside.watch((state, 7)) == (state, 7)  # no batches: left alone
    assert aside.ready()  # nothing to compile for: each at its first call
    watched = aside.watch((state, iter([("a string", 1)])))
    assert next(watched[1]) == ("a string", 1)  # no arrays: drawn as they are
    assert aside.ready() and aside.error is None  # and nothing compiled aside
    watched = aside.watch((state, iter([jnp.ones(3)])))
    next(watched[1])  # what the call it watches draws
    aside.ready()  # the thread starts at the first ask
    aside.join()
    assert aside.ready() and isinstance(aside.error, ValueError)
    with pytest.raises(ValueError, match="no batch of 3"):
        function(state, iter([jnp.ones(3)]))
    logs, _ = function(state, iter([jnp.ones(4)]))
    assert float(logs["loss"]) == 4.0
