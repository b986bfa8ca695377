"""Thousands of steps of JAX `fit` with the callbacks: no donated-buffer
error (the state is read from the trainer's live, donated buffers) and flat
memory. `benchmarks/soak_jax.py` runs it for 10,000 steps (`long_fit`)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import keras_gradmon
from keras_gradmon import GradientMonitorOptimizer

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow

EPOCHS = 10
#: Batches of one example an epoch here (2,000 steps); the soak's 1,000.
STEPS_PER_EPOCH = 200
#: What RSS may grow after the first two epochs (compiles, caches).
GROWTH_MIB = 16


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Memory(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.rss: list[float] = []

    def on_epoch_end(self, epoch, logs=None):
        self.rss.append(_rss_mib())


def long_fit(log_dir: str, steps_per_epoch: int, epochs: int = EPOCHS):
    """`epochs` epochs of `steps_per_epoch` steps (batch 1) of a small MLP,
    statistics every 10 steps and histograms every 100, with the summary
    and alert callbacks; the optimizer and the RSS (MiB) after each epoch."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3), every_n_steps=10, histogram_every_n_steps=100
    )
    model.compile(optimizer=optimizer, loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps_per_epoch, 4)).astype("float32")
    y = x.sum(1, keepdims=True)
    memory = _Memory()
    callbacks = [
        keras_gradmon.GradientSummaryCallback(log_dir),
        keras_gradmon.GradientAlertCallback(),
        memory,
    ]
    model.fit(x, y, batch_size=1, epochs=epochs, verbose=0, callbacks=callbacks)
    return optimizer, memory.rss


def test_thousands_of_steps_with_callbacks(tmp_path):
    optimizer, rss = long_fit(str(tmp_path), STEPS_PER_EPOCH)
    steps = EPOCHS * STEPS_PER_EPOCH
    assert optimizer.read_iterations() == steps
    assert optimizer.snapshot().step == steps - 10
    # After the first epochs (compiles, caches), memory stays flat.
    assert max(rss[2:]) - rss[2] < GROWTH_MIB, rss
