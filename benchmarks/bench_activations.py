"""What `ActivationMonitorCallback` costs in `model.fit`.

The MLP of `bench_keras.py` (64-512-512-10, 8192 samples, batch 128: 64
steps an epoch, XLA) is trained one epoch at a time, the variants taking
turns:

  A         plain `model.fit`: the baseline.
  idle      + ActivationMonitorCallback whose measuring steps never come
            (every_n_steps=10**9): what a non-measuring step costs, the
            callback counting batches.               Target <= 1.01x.
  every-100 + the callback measuring every 100 steps, writing to a temp dir.
  every-10  + the callback measuring every 10 steps.

Then the cost of one measurement (`ActivationMonitor.record`: one
forward pass over the probe batch, statistics, histograms, one host read,
the TensorBoard write and the rules) is timed directly against one train
step, for probe batches of 256 and 1024 samples.

Run from the repository root on an otherwise idle machine:

    .venv/bin/python benchmarks/bench_activations.py --markdown
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import statistics
import tempfile
import time

import keras
import numpy as np
from _timing import format_table, interleaved_times, summarize
from bench_keras import environment, mlp

import keras_gradmon

VARIANTS = {"A": None, "idle": 10**9, "every-100": 100, "every-10": 10}
TARGETS = {"idle": 1.01}
SAMPLES, BATCH = 8192, 128


def _model() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(mlp())
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    return model


def epoch_runner(every: int | None, x, y, probe, log_dir: str):
    model = _model()
    callbacks = []
    if every is not None:
        callbacks.append(
            keras_gradmon.ActivationMonitorCallback(
                probe, log_dir=log_dir, every_n_steps=every
            )
        )

    def one_epoch() -> None:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)

    return one_epoch


def measurement_cost(x, y, probe_sizes, log_dir: str, reps: int) -> list[str]:
    """Milliseconds per `record` against milliseconds per train step."""
    model = _model()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)  # compile
    epochs = []
    for _ in range(3):
        start = time.perf_counter()
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
        epochs.append(time.perf_counter() - start)
    step_ms = 1000 * min(epochs) / (len(x) // BATCH)
    lines = [f"train step: {step_ms:.2f} ms (batch {BATCH})"]
    for size in probe_sizes:
        monitor = keras_gradmon.ActivationMonitor(
            model, x[:size], log_dir=os.path.join(log_dir, str(size))
        )
        monitor.record(0)  # trace
        times = []
        for step in range(1, reps + 1):
            start = time.perf_counter()
            monitor.record(step)
            times.append(time.perf_counter() - start)
        ms = 1000 * statistics.median(times)
        lines.append(
            f"one measurement, probe {size}: {ms:.2f} ms median "
            f"({ms / step_ms:.1f} train steps)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    env = environment()
    print(", ".join(f"{k} {v}" for k, v in env.items()), flush=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, 64)).astype("float32")
    y = rng.integers(0, 10, SAMPLES)
    probe = x[:256]
    with tempfile.TemporaryDirectory(prefix="bench_act_") as log_root:
        units = {
            name: epoch_runner(every, x, y, probe, os.path.join(log_root, name))
            for name, every in VARIANTS.items()
        }
        for unit in units.values():  # compile; step 0 is measured here
            unit()
        rows = summarize(interleaved_times(units, args.reps), "A", TARGETS)
        rows = [{"model": "mlp", **row} for row in rows]
        print(format_table(rows))
        if args.markdown:
            print()
            print(format_table(rows, markdown=True))
        print()
        for line in measurement_cost(x, y, (256, 1024), log_root, reps=20):
            print(line)


if __name__ == "__main__":
    main()
