"""Writing off the training thread: every recorded step lands in the event
file, also when training ends with an exception; the queue is bounded."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import keras
import numpy as np
import pytest

from keras_gradmon import GradientMonitorOptimizer, GradientSummaryCallback
from keras_gradmon.writer import Worker
from tests.helpers import LOSS, data, mlp
from tests.reference import load_events, scalar_series

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_recorded_step_lands(tmp_path):
    x, y = data(n=16 * 40)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.05), every_n_steps=1, histogram_every_n_steps=3
    )
    model.compile(optimizer, LOSS, jit_compile=True)
    history = model.fit(
        x,
        y,
        batch_size=16,
        epochs=2,
        verbose=0,
        callbacks=[GradientSummaryCallback(str(tmp_path))],
    )
    events = load_events(str(tmp_path))
    norms = scalar_series(events, "grad_norm/global")
    assert sorted(norms) == list(range(80))
    histogram_steps = {e.step for e in events.Tensors("grad_hist/mlp/head/kernel")}
    assert histogram_steps == set(range(0, 80, 3))
    # The epoch logs hold the norm of each epoch's last step, exactly.
    assert history.history["grad_norm"][-1] == norms[79]


def test_skipped_steps_do_not_lose_summaries(tmp_path):
    x, y = data(n=16 * 30)
    x[16 * 5 : 16 * 6] = np.nan  # batches 5 and 17 (second epoch) are NaN
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.05),
        every_n_steps=2,
        skip_nonfinite=True,
        histogram_every_n_steps=None,
    )
    model.compile(optimizer, LOSS)
    model.fit(
        x,
        y,
        batch_size=16,
        epochs=2,
        verbose=0,
        shuffle=False,
        callbacks=[GradientSummaryCallback(str(tmp_path))],
    )
    final = int(optimizer.iterations)
    assert final == 60 - 2  # two steps skipped
    steps = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    assert sorted(steps) == list(range(0, final, 2))


@pytest.mark.parametrize(
    "callback",
    [
        "GradientSummaryCallback({log_dir!r})",
        # Summaries wait up to 8 steps for a read: published at exit.
        "GradientMonitorCallback({log_dir!r}, alerts=False)",
    ],
)
def test_steps_land_when_training_raises_and_the_process_exits(tmp_path, callback):
    callback = callback.format(log_dir=str(tmp_path))
    code = textwrap.dedent(
        f"""
        import keras
        from keras_gradmon import (
            GradientMonitorCallback, GradientMonitorOptimizer, GradientSummaryCallback
        )
        from tests.helpers import LOSS, data, mlp

        class Boom(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if batch == 20:
                    raise RuntimeError("boom")

        x, y = data(n=16 * 40)
        model = mlp()
        optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.05),
                                             every_n_steps=1)
        model.compile(optimizer, LOSS, jit_compile=True)
        model.fit(x, y, batch_size=16, verbose=0,
                  callbacks=[{callback}, Boom()])
        """
    )
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode != 0 and "boom" in result.stderr
    steps = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    assert sorted(steps) == list(range(21))


def test_the_queue_is_bounded_and_ordered():
    processed, seen_sizes = [], []
    worker: Worker

    def slow(item: int) -> None:
        seen_sizes.append(worker._queue.qsize())
        time.sleep(0.005)
        processed.append(item)

    worker = Worker(slow, idle=lambda: None, size=2)
    started = time.perf_counter()
    for item in range(12):
        worker.put(item)  # waits while two are queued
    waited = time.perf_counter() - started
    worker.drain()
    assert processed == list(range(12))
    assert max(seen_sizes) <= 2
    assert waited >= 0.005 * (12 - 3)  # the producer was held back
    worker.stop()
    assert not any(t.name == "keras_gradmon-writer" for t in threading.enumerate())


def test_a_worker_error_reaches_the_caller():
    def fail(item: int) -> None:
        raise OSError(f"disk full at {item}")

    worker = Worker(fail, idle=lambda: None, size=4)
    worker.put(1)
    try:
        worker.drain()
    except OSError as error:
        assert "disk full at 1" in str(error)
    else:
        raise AssertionError("the worker's error was swallowed")
    worker.stop()
