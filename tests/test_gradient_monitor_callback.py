"""`GradientMonitorCallback` with a "stop" action: a run whose gradients go
non-finite at a known step stops at that batch, the alert flag sits beside
the numbers in one event file, and the console says training stops."""

from __future__ import annotations

import logging

import keras
import numpy as np
import pytest

from keras_gradmon import (
    AlertOptions,
    GradientMonitorCallback,
    GradientMonitorOptimizer,
)
from tests.helpers import LOSS, data, mlp
from tests.reference import load_events, scalar_series

POISONED = 3  # the batch (and step) whose inputs are NaN


class _Batches(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(batch)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    x, y = data(n=96)  # 6 batches an epoch
    x[POISONED * 16 : (POISONED + 1) * 16] = np.nan
    model = mlp()
    model.compile(
        GradientMonitorOptimizer(
            keras.optimizers.SGD(0.05), every_n_steps=1, histogram_every_n_steps=None
        ),
        LOSS,
        jit_compile=True,
    )
    log_dir = str(tmp_path_factory.mktemp("stopped"))
    callback = GradientMonitorCallback(
        log_dir, alerts=AlertOptions(actions={"critical": "stop"})
    )
    batches = _Batches()
    handler = _Records()
    logger = logging.getLogger("keras_gradmon")
    logger.addHandler(handler)
    try:
        history = model.fit(
            x, y, batch_size=16, epochs=3, shuffle=False, verbose=0,
            callbacks=[callback, batches],
        )
    finally:
        logger.removeHandler(handler)
    return callback, batches, history, load_events(log_dir), handler.records


class _Records(logging.Handler):
    """The records of the "keras_gradmon" logger during the fit."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_training_stops_at_the_batch_that_fired(stopped):
    callback, batches, history, _, _ = stopped
    assert batches.seen == list(range(POISONED + 1))
    assert history.epoch == [0]
    first = callback.alerts[0]
    assert (first.rule, first.tier, first.step) == ("nonfinite", "critical", POISONED)
    assert {alert.step for alert in callback.alerts} == {POISONED}


def test_the_flag_sits_beside_the_numbers(stopped):
    _, _, _, events, _ = stopped
    norms = scalar_series(events, "grad_norm/global")
    assert norms.keys() == set(range(POISONED + 1))
    assert all(np.isfinite(norms[step]) for step in range(POISONED))
    assert scalar_series(events, "grad_nonfinite/global")[POISONED] > 0
    flags = scalar_series(events, "alerts/nonfinite")
    assert flags == {**dict.fromkeys(range(POISONED), 0.0), POISONED: 1.0}


def test_the_console_says_training_stops(stopped):
    *_, records = stopped
    stops = [r for r in records if "stopping training" in r.getMessage()]
    assert len(stops) == 1
    assert stops[0].levelno == logging.CRITICAL
    message = stops[0].getMessage()
    assert f"at step {POISONED}" in message
    assert "Training ends after the current batch" in message
