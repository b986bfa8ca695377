"""Overhead of keras_gradmon in `model.fit`, against plain XLA training.

For each model (see `_models.py`: the MLP 64-512-512-10 of the peer
baseline, a small convnet, a BatchNorm CNN, a transformer classifier, an
LSTM/GRU model, ResNet50V2 at 32x32) it times epochs of `model.fit`
(`--steps` steps each, 256 by default) for each variant:

  A        plain `model.fit`, Adam(1e-3), jit_compile=True: the baseline.
  A-built  A with Adam built before `fit` (traced once, as the wrapped step).
  A-again  A again, a model of its own: its ratio to A is the run's noise.
  B        statistics every step (no histograms) + GradientMonitorCallback.
                                                             Target <= 1.30x.
  B-no-cb  B without the callback (the in-step cost).        Target <= 1.25x.
  B-read1  B with the callback reading after each step (`read_every=1`),
           not every 8 steps.
  B-econ   `preset("economy")` every step + callback.        Target <= 1.12x.
  C        every 100 steps, + callback.                      Target <= 1.02x.
  defaults the defaults (every 100, histograms every 1,000, update ratios),
           + callback: two programs chosen on the host.      Target <= 1.02x.
  C-no-cb  C without the callback: one program, the monitor's conditional
           in every step.
  D        C + histograms every 100 steps.                   Target <= 1.03x.
  full     every feature: statistics every step, histograms every 100,
           groups, global-norm clipping, + callback (its first fit is the
           compile time of everything).
  E        the hand-written alternative: a train_step writing tf.summary
           histograms and norms of every gradient each step (no XLA).

Every variant's model is built (same seed, same weights) and its first
`fit` timed: compilation included, that is the "first fit" column. Then
each of `--reps` repetitions runs one epoch of every variant in turn, so
drift hits all alike. The targets of real models (B on bn_cnn, transformer,
lstm) are 1.30x too.

Run from the repository root on an otherwise idle machine:

    .venv/bin/python benchmarks/bench_keras.py --models mlp --markdown
    .venv/bin/python benchmarks/bench_keras.py --models bn_cnn,transformer,lstm
    .venv/bin/python benchmarks/bench_keras.py --models resnet50v2 --variants A,B,C
    .venv/bin/python benchmarks/bench_keras.py --quick    # smoke run
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
import time

import keras
import tensorflow as tf
from _models import MODELS, Spec
from _signals import DEFAULTS, HUNDRED, SIGNAL_TARGETS, SIGNAL_VARIANTS, make_optimizer
from _timing import cpu_count, format_table, interleaved_times, summarize

import keras_gradmon
from keras_gradmon import (
    GradientMonitorCallback,
    MonitorConfig,
)

EVERY = {"every_n_steps": 1, "histogram_every_n_steps": None}
# name: (GradientMonitorOptimizer options or None, with GradientMonitorCallback)
VARIANTS = {
    "A": (None, False),
    # A with Adam built before the fit: Keras on TensorFlow builds it in the
    # train function's first trace, then traces again (the callback builds
    # the wrapper first: `programs.build_before_tracing`).
    "A-built": (None, False),
    # A again, a second model of its own: its ratio to A is this machine's
    # noise, the resolution of every other ratio of the same run.
    "A-again": (None, False),
    "B": (EVERY, True),
    "B-no-cb": (EVERY, False),
    "B-read1": (EVERY, "read1"),
    "B-econ": ({"config": MonitorConfig.preset("economy"), "every_n_steps": 1}, True),
    "C": (HUNDRED, True),
    "defaults": (DEFAULTS, True),
    "C-no-cb": (HUNDRED, False),
    "D": ({**HUNDRED, "histogram_every_n_steps": 100}, True),
    "full": (
        {
            "every_n_steps": 1,
            "histogram_every_n_steps": 100,
            # Groups every model here has (paths differ between models).
            "groups": {"kernels": "kernel$", "biases": "bias$"},
            "clipping": {"method": "global_norm", "max_norm": 1.0},
        },
        True,
    ),
    "E": (None, False),  # HandLogged, without XLA
    **SIGNAL_VARIANTS,  # issue 21's signals: see _signals.py
}
TARGETS = {
    "B": 1.30,
    "B-no-cb": 1.25,
    "B-econ": 1.12,
    "C": 1.02,
    "defaults": 1.02,
    "D": 1.03,
}
TARGETS.update(SIGNAL_TARGETS)


class HandLogged(keras.Model):
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


def _model(variant: str, spec: Spec) -> keras.Model:
    keras.utils.set_random_seed(0)
    model = spec.build()
    if variant == "E":
        model = HandLogged(model.inputs, model.outputs)
    return model


def epoch_runner(variant: str, spec: Spec, x, y, log_dir: str):
    """Builds and compiles the model of `variant`; returns a one-epoch callable."""
    options, with_callback = VARIANTS[variant]
    optimizer = make_optimizer(options)
    read = {"read_every": 1} if with_callback == "read1" else {}
    callback = GradientMonitorCallback(log_dir, alerts=False, **read)
    callbacks = [callback] if with_callback else []
    hand_logged = variant == "E"
    model = _model(variant, spec)
    model.compile(
        optimizer,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=not hand_logged,
    )
    if variant == "A-built":
        model.optimizer.build(model.trainable_variables)
    if model.jit_compile != (not hand_logged):
        raise RuntimeError(f"{variant}: Keras set jit_compile={model.jit_compile}")
    writer = tf.summary.create_file_writer(log_dir) if hand_logged else None

    def one_epoch() -> None:
        with writer.as_default() if writer else contextlib.nullcontext():
            model.fit(
                x, y, batch_size=spec.batch, epochs=1, verbose=0, callbacks=callbacks
            )

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
    steps: int,
    log_root: str,
    make_unit=None,
    variants=None,
    targets=None,
) -> list[dict]:
    """Times the first fit and `reps` interleaved epochs of every variant on
    model `name`; `make_unit(variant, spec, x, y, log_dir)` builds one
    (default: `epoch_runner`)."""
    make_unit = make_unit or epoch_runner
    variants = list(VARIANTS if variants is None else variants)
    spec = MODELS[name]
    x, y = spec.data(steps)
    print(f"{name}: {steps} steps of batch {spec.batch}; {reps} reps", flush=True)
    units, first_fit = {}, {}
    for variant in variants:
        units[variant] = make_unit(
            variant, spec, x, y, os.path.join(log_root, name, variant)
        )
        start = time.perf_counter()
        units[variant]()  # compiles
        first_fit[variant] = time.perf_counter() - start
        print(f"  {variant}: first fit {first_fit[variant]:.1f} s", flush=True)
    cpu: dict = {}
    times = interleaved_times(units, reps, cpu)
    rows = summarize(times, "A", TARGETS if targets is None else targets, cpu)
    for row in rows:
        row["first_fit"] = first_fit[row["name"]]
        row["first_fit_ratio"] = first_fit[row["name"]] / first_fit["A"]
    return [{"model": name, **row} for row in rows]


def parse_args(description: str) -> tuple[argparse.Namespace, list[str], int]:
    """The command line shared by the `model.fit` benchmarks."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--reps", type=int, help="repetitions (default 9, quick 2)")
    parser.add_argument("--models", default="mlp", help="comma-separated")
    parser.add_argument("--variants", help="comma-separated (default: all)")
    parser.add_argument("--steps", type=int, help="steps an epoch (default 256)")
    parser.add_argument("--quick", action="store_true", help="32 steps, 2 reps")
    parser.add_argument("--json", metavar="PATH", help="write the results here")
    parser.add_argument("--markdown", action="store_true", help="also a Markdown table")
    args = parser.parse_args()
    models = args.models.split(",")
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    args.steps = args.steps or (32 if args.quick else 256)
    if args.variants:
        args.variants = args.variants.split(",")
        if "A" not in args.variants:
            args.variants.insert(0, "A")
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
                {"environment": env, "reps": reps, "steps": args.steps, "rows": rows},
                file,
                indent=2,
            )


def warm_up() -> None:
    """One tiny XLA fit, so that the process's one-time start-up costs do not
    land in the first variant's first-fit time."""
    spec = MODELS["mlp"]
    x, y = spec.data(2)
    model = spec.build()
    model.compile("adam", "sparse_categorical_crossentropy", jit_compile=True)
    model.fit(x, y, batch_size=spec.batch, verbose=0)


def main() -> None:
    args, models, reps = parse_args(__doc__.splitlines()[0])
    env = environment()
    print(", ".join(f"{k} {v}" for k, v in env.items()), flush=True)
    warm_up()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_keras_") as log_root:
        for name in models:
            rows += bench_model(
                name, reps, args.steps, log_root, variants=args.variants
            )
    print_results(rows, env, reps, args)


if __name__ == "__main__":
    main()
