"""10,000 steps of JAX `fit` with the callbacks: no donated-buffer error
(the state is read from the trainer's live, donated buffers) and flat
memory."""

from __future__ import annotations

import keras
import numpy as np

import keras_gradmon
from keras_gradmon import GradientMonitorOptimizer


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


def test_ten_thousand_steps_with_callbacks(tmp_path):
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
    x = rng.normal(size=(1000, 4)).astype("float32")
    y = x.sum(1, keepdims=True)
    memory = _Memory()
    callbacks = [
        keras_gradmon.GradientSummaryCallback(str(tmp_path)),
        keras_gradmon.GradientAlertCallback(),
        memory,
    ]
    model.fit(x, y, batch_size=1, epochs=10, verbose=0, callbacks=callbacks)
    assert optimizer.read_iterations() == 10_000
    assert optimizer.snapshot().step == 9_990
    # After the first epochs (compiles, caches), memory stays flat.
    assert max(memory.rss[2:]) - memory.rss[2] < 16, memory.rss
