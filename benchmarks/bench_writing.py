"""Time the training thread spends on writing, per summary step.

`GradientMonitorCallback.on_train_batch_end` is what the training thread
runs after every step: when a summary is due it captures the statistics
(two raw variable reads) and queues them; a worker thread reads them back
and writes them. This script times each call of it during `model.fit`
(every step a summary step) and reports the distribution, in
microseconds, for:

  scalars     statistics every step (MLP: 106 scalars a step).
  histograms  statistics and histograms every step (12 histograms).

Issue 15's target: at most 0.2 ms per summary step on the training
thread. A full queue makes `capture` wait (back-pressure): that wait is
included, so a worker slower than training shows here.

Run from the repository root on an otherwise idle machine:

    .venv/bin/python benchmarks/bench_writing.py
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import tempfile
import time

import keras
import numpy as np
from _models import MODELS

from keras_gradmon import GradientMonitorCallback, GradientMonitorOptimizer

VARIANTS = {
    "scalars": {"every_n_steps": 1, "histogram_every_n_steps": None},
    "histograms": {"every_n_steps": 1, "histogram_every_n_steps": 1},
}
TARGET_US = 200.0


def timed_callback(log_dir: str) -> tuple[GradientMonitorCallback, list[float]]:
    """The callback, its `on_train_batch_end` timed into the returned list."""
    callback = GradientMonitorCallback(log_dir, alerts=False)
    times: list[float] = []
    batch_end = callback.on_train_batch_end

    def timed(batch: int, logs: dict | None = None) -> None:
        start = time.perf_counter()
        batch_end(batch, logs)
        times.append(time.perf_counter() - start)

    callback.on_train_batch_end = timed
    return callback, times


def measure(options: dict, steps: int, epochs: int) -> np.ndarray:
    """Microseconds of each `on_train_batch_end` after the first epoch."""
    spec = MODELS["mlp"]
    x, y = spec.data(steps)
    keras.utils.set_random_seed(0)
    model = spec.build()
    optimizer = GradientMonitorOptimizer(keras.optimizers.Adam(1e-3), **options)
    model.compile(
        optimizer,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    callback, times = timed_callback(tempfile.mkdtemp(prefix="bench_writing_"))
    model.fit(
        x, y, batch_size=spec.batch, epochs=epochs, verbose=0, callbacks=[callback]
    )
    return np.asarray(times[steps:]) * 1e6  # the first epoch compiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    lines = [
        "| variant | calls | median us | p90 us | p99 us | max us | target | pass |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    for name, options in VARIANTS.items():
        us = measure(options, args.steps, args.epochs)
        p50, p90, p99 = np.percentile(us, [50, 90, 99])
        verdict = "pass" if p50 <= TARGET_US else "FAIL"
        lines.append(
            f"| {name} | {len(us)} | {p50:.0f} | {p90:.0f} | {p99:.0f} | "
            f"{us.max():.0f} | <= {TARGET_US:.0f} | {verdict} |"
        )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
