"""Overhead of keras_gradmon in `model.fit`, against plain XLA training.

For each model (an MLP 64-512-512-10 on 8192 samples, batch 128, as in the
peer baseline `peer_overhead_keras.py`; a small convnet on 2048 32x32x3
images, batch 64) it times one epoch of `model.fit` for each variant:

  A        plain `model.fit`, Adam(1e-3), jit_compile=True: the baseline.
  B        GradientMonitorOptimizer(every_n_steps=1, no histograms) +
           GradientSummaryCallback writing to a temp dir.   Target <= 1.05x.
  B-no-cb  B without the callback: statistics computed in the step, nothing
           written (separates in-step cost from writing cost).
  B-econ   B with MonitorConfig.preset("economy"): gradient norms and
           non-finite counts only, no weight statistics.    Target <= 1.05x.
  C        every_n_steps=100, no histograms, + callback.    Target <= 1.02x.
  D        every_n_steps=100, histogram_every_n_steps=100, + callback.
                                                            Target <= 1.05x.
  E        the hand-written alternative: a train_step writing tf.summary
           histograms and norms of every gradient each step (cannot use XLA).

All models are built (same seed, same weights) and warmed up (compiled) first;
then each of `--reps` repetitions runs one epoch of every variant in turn, so
drift hits all alike. Reported: median s/epoch, median(variant)/median(A),
the min-max of variant/A within a repetition, and the ratio of means. With
every_n_steps=100 and 32-64 steps per epoch, most epochs of C and D contain
no summary step, so the median shows the per-step conditional and the mean
ratio the amortized summary cost too.

Run from the repository root (timings need an otherwise idle machine):

    .venv/bin/python benchmarks/bench_keras.py            # or: make bench
    .venv/bin/python benchmarks/bench_keras.py --quick    # smoke run
    .venv/bin/python benchmarks/bench_keras.py --markdown --json out.json
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import contextlib
import json
import platform
import tempfile

import keras
import numpy as np
import tensorflow as tf
from _timing import cpu_count, format_table, interleaved_times, summarize

import keras_gradmon
from keras_gradmon import (
    GradientMonitorOptimizer,
    GradientSummaryCallback,
    MonitorConfig,
)

# name: (GradientMonitorOptimizer options or None, with GradientSummaryCallback)
VARIANTS = {
    "A": (None, False),
    "B": ({"every_n_steps": 1, "histogram_every_n_steps": None}, True),
    "B-no-cb": ({"every_n_steps": 1, "histogram_every_n_steps": None}, False),
    "B-econ": ({"config": MonitorConfig.preset("economy"), "every_n_steps": 1}, True),
    "C": ({"every_n_steps": 100, "histogram_every_n_steps": None}, True),
    "D": ({"every_n_steps": 100, "histogram_every_n_steps": 100}, True),
    "E": (None, False),  # HandLogged, without XLA
}
TARGETS = {"B": 1.05, "B-econ": 1.05, "C": 1.02, "D": 1.05}


def mlp() -> list:
    return [
        keras.Input((64,)),
        keras.layers.Dense(512, activation="relu"),
        keras.layers.Dense(512, activation="relu"),
        keras.layers.Dense(10),
    ]


def conv() -> list:
    return [
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
    ]


# name: (layers, input shape, samples, batch size)
MODELS = {"mlp": (mlp, (64,), 8192, 128), "conv": (conv, (32, 32, 3), 2048, 64)}


class HandLogged(keras.Sequential):
    """Variant E, as in the peer script: tf.summary of every gradient, each step."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        step = self.optimizer.iterations
        for g, v in zip(grads, self.trainable_variables):
            tf.summary.histogram("grad/" + v.path, g, step=step)
            tf.summary.scalar("grad_norm/" + v.path, tf.norm(g), step=step)
        tf.summary.scalar("grad_norm/global", tf.linalg.global_norm(grads), step=step)
        self.optimizer.apply(grads, self.trainable_variables)
        return {"loss": loss}


def epoch_runner(variant: str, layers, x, y, batch: int, log_dir: str):
    """Builds and compiles the model of `variant`; returns a one-epoch callable."""
    keras.utils.set_random_seed(0)
    options, with_callback = VARIANTS[variant]
    optimizer = keras.optimizers.Adam(1e-3)
    if options is not None:
        optimizer = GradientMonitorOptimizer(optimizer, **options)
    callbacks = [GradientSummaryCallback(log_dir)] if with_callback else []
    hand_logged = variant == "E"
    model = (HandLogged if hand_logged else keras.Sequential)(layers())
    model.compile(
        optimizer,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=not hand_logged,
    )
    if model.jit_compile != (not hand_logged):
        raise RuntimeError(f"{variant}: Keras set jit_compile={model.jit_compile}")
    writer = tf.summary.create_file_writer(log_dir) if hand_logged else None

    def one_epoch() -> None:
        with writer.as_default() if writer else contextlib.nullcontext():
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=callbacks)

    return one_epoch


def environment() -> dict:
    devices = tf.config.list_physical_devices()
    return {
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "keras_gradmon": keras_gradmon.__version__,
        "cpus": cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "devices": [f"{d.device_type}:{d.name}" for d in devices],
    }


def bench_model(
    name: str,
    reps: int,
    quick: bool,
    log_root: str,
    make_unit=None,
    variants=None,
    targets=None,
) -> list[dict]:
    """Times every variant on model `name`; `make_unit(variant, layers, x, y,
    batch, log_dir)` builds one (default: `epoch_runner`)."""
    make_unit = make_unit or epoch_runner
    variants = VARIANTS if variants is None else variants
    layers, shape, n, batch = MODELS[name]
    n = n // 4 if quick else n
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, *shape)).astype("float32")
    y = rng.integers(0, 10, n)
    units = {
        v: make_unit(v, layers, x, y, batch, os.path.join(log_root, name, v))
        for v in variants
    }
    print(f"{name}: {n} samples, batch {batch}; warm-up, then {reps} reps", flush=True)
    for unit in units.values():
        unit()
    rows = summarize(
        interleaved_times(units, reps), "A", TARGETS if targets is None else targets
    )
    return [{"model": name, **row} for row in rows]


def parse_args(description: str) -> tuple[argparse.Namespace, list[str], int]:
    """The command line shared by the `model.fit` benchmarks."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--reps", type=int, help="repetitions (default 9, quick 2)")
    parser.add_argument("--models", default="mlp,conv", help="comma-separated")
    parser.add_argument("--quick", action="store_true", help="1/4 data, 2 reps")
    parser.add_argument("--json", metavar="PATH", help="write the results here")
    parser.add_argument("--markdown", action="store_true", help="also a Markdown table")
    args = parser.parse_args()
    models = args.models.split(",")
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    return args, models, args.reps or (2 if args.quick else 9)


def print_results(rows: list[dict], env: dict, reps: int, args) -> None:
    """The table (and Markdown, JSON as asked)."""
    print(format_table(rows))
    if args.markdown:
        print()
        print(format_table(rows, markdown=True))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(
                {"environment": env, "reps": reps, "quick": args.quick, "rows": rows},
                file,
                indent=2,
            )


def main() -> None:
    args, models, reps = parse_args(__doc__.splitlines()[0])
    env = environment()
    print(", ".join(f"{k} {v}" for k, v in env.items()), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_keras_") as log_root:
        for name in models:
            rows += bench_model(name, reps, args.quick, log_root)
    print_results(rows, env, reps, args)


if __name__ == "__main__":
    main()
