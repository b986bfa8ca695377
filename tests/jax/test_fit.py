"""`GradientMonitorOptimizer` in Keras 3's JAX `fit`: training unchanged bit
for bit, one compile, no device-to-host transfer on steps with nothing due,
the callbacks reading the trainer's live state, and skipped steps."""

from __future__ import annotations

import logging

import jax
import keras
import numpy as np
import pytest

import keras_gradmon
from keras_gradmon import GradientMonitorOptimizer
from tests.jax.models import compiled, data, states_equal


def _fit(optimizer, steps: int, callbacks=(), batch_size: int = 8, seed: int = 0):
    model = compiled(optimizer, seed)
    x, y = data(steps * batch_size)
    model.fit(
        x,
        y,
        batch_size=batch_size,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=list(callbacks),
    )
    return model


def _inner_state(optimizer) -> list:
    return [keras.ops.convert_to_numpy(v) for v in optimizer.variables]


@pytest.fixture(scope="module")
def plain_200_steps() -> tuple[list, list]:
    """The unwrapped Adam's 200 steps, shared by the wrapped runs: the
    weights and the optimizer's variables after them."""
    plain = _fit(keras.optimizers.Adam(1e-3), 200)
    return plain.get_weights(), _inner_state(plain.optimizer)


@pytest.mark.parametrize(
    "options",
    [
        dict(every_n_steps=7, histogram_every_n_steps=5),
        dict(every_n_steps=1, weight_statistics=False),
    ],
)
def test_training_unchanged_for_200_steps(options, plain_200_steps):
    weights, inner = plain_200_steps
    monitored = GradientMonitorOptimizer(keras.optimizers.Adam(1e-3), **options)
    wrapped = _fit(monitored, 200)
    assert states_equal(weights, wrapped.get_weights())
    assert states_equal(inner, _inner_state(monitored.inner_optimizer))
    snapshot = monitored.snapshot()
    assert snapshot.step == (196 if options["every_n_steps"] == 7 else 199)
    assert np.isfinite(snapshot.totals["grad_norm"])


class _Compiles(logging.Handler):
    """Counts XLA compilations of the train step (`jax_log_compiles`)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Compiling") and "train_step" in message:
            self.count += 1


def test_train_step_compiles_once_across_due_and_skipped_steps():
    monitored = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3),
        every_n_steps=3,
        histogram_every_n_steps=4,
        skip_nonfinite=True,
    )
    counter = _Compiles()
    logging.getLogger("jax").addHandler(counter)
    jax.config.update("jax_log_compiles", True)
    try:
        model = compiled(monitored)
        x, y = data(96)
        x[40] = np.nan  # the sixth batch's gradients are NaN: skipped
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    finally:
        jax.config.update("jax_log_compiles", False)
        logging.getLogger("jax").removeHandler(counter)
    assert counter.count == 1
    assert monitored.snapshot().totals["skipped_steps"] == 2.0  # once an epoch
    assert int(monitored.read_iterations()) == 22


class _Batches(keras.callbacks.Callback):
    """Notes the batch in progress, and guards it against device-to-host
    transfers where nothing is due (the guard is what catches a transfer on
    an accelerator; on CPU, where arrays live on the host, JAX does not
    guard, so the host reads of the state are counted too)."""

    def __init__(self, quiet: set[int]) -> None:
        super().__init__()
        self.quiet, self.batch, self.guard = quiet, None, None

    def on_train_batch_begin(self, batch, logs=None):
        self.batch = batch
        if batch in self.quiet:
            self.guard = jax.transfer_guard_device_to_host("disallow")
            self.guard.__enter__()

    def close(self) -> None:
        if self.guard is not None:
            self.guard.__exit__(None, None, None)
            self.guard = None


class _Release(keras.callbacks.Callback):
    def __init__(self, batches: _Batches) -> None:
        super().__init__()
        self.batches = batches

    def on_train_batch_end(self, batch, logs=None):
        self.batches.close()


def test_steps_with_nothing_due_make_no_host_transfer(tmp_path, monkeypatch):
    from keras_gradmon import backend

    monitored = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3), every_n_steps=10, histogram_every_n_steps=20
    )
    # Batch 0 is due (and calibrates the steps per batch); 10 and 20 are due.
    batches = _Batches(quiet={b for b in range(1, 30) if b % 10})
    reads: list = []
    capture = backend.capture

    def counted(*args):
        reads.append(batches.batch)
        return capture(*args)

    monkeypatch.setattr(backend, "capture", counted)
    callbacks = [
        batches,
        keras_gradmon.GradientSummaryCallback(str(tmp_path)),
        keras_gradmon.GradientAlertCallback(),
        _Release(batches),
    ]
    _fit(monitored, 30, callbacks)
    # None: the step count read when the epoch starts; 29: training's end.
    assert reads and set(reads) <= {None, 0, 10, 20, 29}
    assert {0, 10, 20} <= set(reads)
    assert monitored.snapshot().step == 20


def test_summaries_read_the_trainers_live_state(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    monitored = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3), every_n_steps=4, histogram_every_n_steps=8
    )
    logs = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs_=None, **kw: logs.append(
            dict(kw.get("logs") or logs_ or {})
        )
    )
    summary = keras_gradmon.GradientSummaryCallback(str(tmp_path))
    _fit(monitored, 24, [summary, record])
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0}).Reload()
    written = {e.step: e for e in events.Tensors("grad_norm/global")}
    assert sorted(written) == list(range(0, 24, 4))
    for step, event in written.items():
        value = float(np.asarray(jax.numpy.asarray(0)) + _scalar(event))
        assert value == pytest.approx(logs[step]["grad_norm"], rel=1e-6)
    histograms = events.Tensors("grad_hist/" + monitored.monitor.paths[0])
    assert [e.step for e in histograms] == [0, 8, 16]


def _scalar(event) -> float:
    from tensorboard.util import tensor_util

    return float(tensor_util.make_ndarray(event.tensor_proto))


class _Threads(keras_gradmon.GradientSummaryCallback):
    """The summary callback, noting the threads its batch hooks run on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.threads: set = set()

    def on_train_batch_end(self, batch, logs=None):
        import threading

        self.threads.add(threading.current_thread().name)
        super().on_train_batch_end(batch, logs)


def test_async_batch_hooks_write_every_summary(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    monitored = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3), every_n_steps=3, histogram_every_n_steps=6
    )
    summary = _Threads(str(tmp_path))
    alerts = keras_gradmon.GradientAlertCallback()
    model = compiled(monitored)
    x, y = data(8 * 40)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[summary, alerts])
    # Keras ran the hooks off the training thread (both callbacks say so).
    assert summary.threads and "MainThread" not in summary.threads
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0}).Reload()
    assert [e.step for e in events.Tensors("grad_norm/global")] == list(range(0, 80, 3))
    histograms = events.Tensors("grad_hist/" + monitored.monitor.paths[0])
    assert [e.step for e in histograms] == list(range(0, 80, 6))
    assert alerts.checker.checked_step == 78


class _Seen(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.seen.append(batch)


def test_a_stop_acts_two_batches_after_the_step_on_jax(tmp_path):
    # docs/architecture.md, "Alerts": on JAX the rules run on a step's
    # summary once the next step runs, so the device never waits for the
    # host; a "stop" then ends fit after the batch two after the step.
    poisoned = 3
    model = compiled(
        GradientMonitorOptimizer(
            keras.optimizers.SGD(0.05), every_n_steps=1, histogram_every_n_steps=None
        )
    )
    x, y = data(8 * 8)
    x[poisoned * 8 : (poisoned + 1) * 8] = np.nan
    callback = keras_gradmon.GradientMonitorCallback(
        str(tmp_path), alerts=keras_gradmon.AlertOptions(actions={"critical": "stop"})
    )
    seen = _Seen()
    model.fit(
        x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
        callbacks=[callback, seen],
    )  # fmt: skip
    assert seen.seen == list(range(poisoned + 3))
    first = callback.alerts[0]
    assert (first.rule, first.tier, first.step) == ("nonfinite", "critical", poisoned)
    assert callback.checker.checked_step == poisoned + 2  # the fit's last step


def test_rules_a_batch_later_miss_no_summary_and_measure_only_when_due(
    tmp_path, monkeypatch
):
    from keras_gradmon.programs import Programs
    from tests.reference import load_events, scalar_series

    monkeypatch.setattr(Programs, "patience", 0.0)  # the idle program at once
    monitored = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3), every_n_steps=4, histogram_every_n_steps=7
    )
    callback = keras_gradmon.GradientMonitorCallback(str(tmp_path))  # rules on
    model = compiled(monitored)
    x, y = data(8 * 20)
    model.fit(
        x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[callback]
    )
    events = load_events(str(tmp_path))
    assert sorted(scalar_series(events, "grad_norm/global")) == list(range(0, 40, 4))
    assert callback.checker.checked_step == 36
    # Measuring: 0 (the first call) and the histograms' 7, 14, 21, 28, 35;
    # due: the other multiples of 4. A histogram-only summary is no miss.
    calls = Programs.made_for(model).calls
    assert calls == {"measuring": 6, "due": 8, "idle": 26}


def test_read_every_loses_no_summary_on_jax(tmp_path):
    """Summaries at every step, read every 8 steps (the default): each of
    the 21 steps is written once, with its own value."""
    from tests.reference import load_events, scalar_series

    optimizer = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3), every_n_steps=1, histogram_every_n_steps=None
    )
    callback = keras_gradmon.GradientMonitorCallback(str(tmp_path), alerts=False)
    _fit(optimizer, 21, [callback])
    written = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    assert sorted(written) == list(range(21))
    assert len(set(written.values())) == 21
