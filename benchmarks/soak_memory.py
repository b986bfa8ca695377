"""Memory over a long run: RSS every 10,000 steps of `model.fit` under XLA
with statistics every step, histograms every 10 steps, and every callback
(summaries, alerts, activations) on. A soak benchmark, not a timed test.

The run is one `fit` of many epochs over a small in-memory dataset (steps
of a 64-512-512-10 MLP, batch 128), so the only thing that can grow is what
training and monitoring keep. The slope is fitted over the samples after
the first (warm-up: compilation, first event-file writes).

Run from the repository root:

    .venv/bin/python benchmarks/soak_memory.py --steps 100000
    .venv/bin/python benchmarks/soak_memory.py --steps 20000 --every 2000  # quick
    .venv/bin/python benchmarks/soak_memory.py --variant plain   # no monitoring
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import gc
import resource
import tempfile
import time

import keras
import numpy as np

import keras_gradmon

STEPS_PER_EPOCH = 100


def rss_mb() -> float:
    """The resident set size of this process, in MB (Linux /proc)."""
    with open("/proc/self/statm") as file:
        pages = int(file.read().split()[1])
    return pages * resource.getpagesize() / 1e6


class RssLog(keras.callbacks.Callback):
    """Prints RSS every `every` steps (at epoch ends) and keeps the samples."""

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every = every
        self.samples: list[tuple[int, float]] = []
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        step = (epoch + 1) * STEPS_PER_EPOCH
        if step % self.every == 0:
            gc.collect()
            self.samples.append((step, rss_mb()))
            elapsed = time.perf_counter() - self.start
            print(
                f"step {step:>7}: RSS {self.samples[-1][1]:8.1f} MB  ({elapsed:.0f} s)"
            )


def build(variant: str, log_dir: str, probe: np.ndarray) -> tuple:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    optimizer = keras.optimizers.Adam(1e-3)
    callbacks = []
    if variant != "plain":
        optimizer = keras_gradmon.GradientMonitorOptimizer(
            optimizer, every_n_steps=1, histogram_every_n_steps=10
        )
    if variant == "all":
        callbacks = [
            keras_gradmon.GradientMonitorCallback(log_dir),
            keras_gradmon.ActivationMonitorCallback(
                probe, log_dir=os.path.join(log_dir, "activations"), every_n_steps=100
            ),
        ]
    model.compile(
        optimizer,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    return model, callbacks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=10_000, help="RSS sample period")
    parser.add_argument("--variant", choices=("all", "wrapper", "plain"), default="all")
    args = parser.parse_args()
    if args.every % STEPS_PER_EPOCH or args.steps % args.every:
        parser.error(
            f"--every must divide --steps and be a multiple of {STEPS_PER_EPOCH}"
        )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS_PER_EPOCH * 128, 64)).astype("float32")
    y = rng.integers(0, 10, len(x))
    with tempfile.TemporaryDirectory(prefix="soak_") as log_dir:
        model, callbacks = build(args.variant, log_dir, x[:256])
        log = RssLog(args.every)
        start = rss_mb()
        print(f"{args.variant}: {args.steps} steps; RSS at start {start:.1f} MB")
        model.fit(
            x,
            y,
            batch_size=128,
            epochs=args.steps // STEPS_PER_EPOCH,
            verbose=0,
            callbacks=[*callbacks, log],
        )
    steps, rss = np.array(log.samples).T if log.samples else ([], [])
    if len(steps) >= 3:
        slope = np.polyfit(steps[1:], rss[1:], 1)[0] * 1000
        print(f"slope after the first sample: {slope:+.3f} MB per 1,000 steps")


if __name__ == "__main__":
    main()
