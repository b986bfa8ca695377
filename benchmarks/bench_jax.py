"""Overhead of keras_gradmon in `model.fit` on Keras 3's JAX backend.

Times epochs of `model.fit` (`--steps` steps each, 256 by default) of the
MLP 64-512-512-10 (`_models.py`) for each variant, interleaved:

  A        plain `model.fit`, Adam(1e-3): the baseline (JAX jit, XLA).
  A-again  A again, a model of its own: its ratio to A is the run's noise.
  B        statistics every step (no histograms) + GradientMonitorCallback.
                                                             Target <= 1.30x.
  B-no-cb  B without the callback (the in-step cost).
  C        every 100 steps, + callback.                      Target <= 1.02x.
  defaults the defaults (every 100, histograms every 1,000, update ratios),
           + callback: two programs chosen on the host.      Target <= 1.02x.
  C-no-cb  C without the callback (the in-step cost of a step not due).
  B-no-cb-no-update, B-no-cb-grads: B-no-cb without the update ratios, and
           with the gradients' statistics only (where the in-step time goes).
  D        C + histograms every 100 steps.
  B-alerts, defaults-alerts: B and defaults with the callback's default
           alert rules on (the others run it with `alerts=False`).
  B-read1, B-alerts-read1: B and B-alerts with the callback reading the
           summaries after each step (`read_every=1`), not every 8 steps.

`first fit` is each variant's first fit of a single batch on a fresh
model: compilation and one step; its ratio to A's has the target <= 1.3x.
Each is timed in a fresh process after a warm-up fit of another plain MLP,
the variants taking turns `--first-reps` times (the median is shown).

    .venv/bin/python benchmarks/bench_jax.py --markdown
    .venv/bin/python benchmarks/bench_jax.py --quick    # smoke run
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import keras
from _models import MODELS
from _signals import DEFAULTS, HUNDRED, SIGNAL_TARGETS, SIGNAL_VARIANTS, make_optimizer
from _timing import cpu_count, format_table, interleaved_times, summarize

import keras_gradmon
from keras_gradmon import GradientMonitorCallback

EVERY = {"every_n_steps": 1, "histogram_every_n_steps": None}
VARIANTS = {
    "A": (None, False),
    # A again, a second model of its own: its ratio to A is this machine's
    # noise, the resolution of every other ratio of the same run.
    "A-again": (None, False),
    "B": (EVERY, True),
    "B-no-cb": (EVERY, False),
    "C": (HUNDRED, True),
    "defaults": (DEFAULTS, True),
    "C-no-cb": (HUNDRED, False),
    "B-no-cb-no-update": ({**EVERY, "update_statistics": False}, False),
    "B-no-cb-grads": (
        {**EVERY, "weight_statistics": False, "update_statistics": False},
        False,
    ),
    "D": ({**HUNDRED, "histogram_every_n_steps": 100}, True),
    "B-alerts": (EVERY, "alerts"),
    "defaults-alerts": (DEFAULTS, "alerts"),
    "B-read1": (EVERY, "read1"),
    "B-alerts-read1": (EVERY, "alerts-read1"),
    **SIGNAL_VARIANTS,  # issue 21's signals: see _signals.py
}
TARGETS = {
    "B": 1.30,
    "C": 1.02,
    "defaults": 1.02,
    "B-alerts": 1.30,
    "defaults-alerts": 1.02,
    "B-read1": 1.30,
    "B-alerts-read1": 1.30,
    **SIGNAL_TARGETS,
}


def fitter(variant: str, x, y, log_dir: str, batch: int, model_name: str = "mlp"):
    """A fresh compiled model (`_models.py`, the MLP by default) of `variant`
    and a one-epoch fit of it."""
    options, with_callback = VARIANTS[variant]
    optimizer = make_optimizer(options)
    mode = str(with_callback)
    read = {"read_every": 1} if mode.endswith("read1") else {}
    callback = GradientMonitorCallback(
        log_dir, alerts=mode.startswith("alerts"), **read
    )
    callbacks = [callback] if with_callback else []
    keras.utils.set_random_seed(0)
    model = MODELS[model_name].build()
    model.compile(
        optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )

    def one_epoch() -> None:
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=callbacks)

    return one_epoch


def first_fit(
    variant: str, log_root: str, model_name: str = "mlp", batches: int = 1
) -> float:
    """Seconds of `variant`'s first fit of `batches` batches on a fresh
    `model_name`, in this process, after a warm-up fit of a plain MLP (the
    process's own start-up, JAX's and Keras's first traces, is not counted)."""
    mlp = MODELS["mlp"]
    fitter("A", *mlp.data(1), os.path.join(log_root, "warm-up"), mlp.batch)()
    spec = MODELS[model_name]
    x, y = spec.data(batches)
    fit = fitter(variant, x, y, os.path.join(log_root, variant), spec.batch, model_name)
    start = time.perf_counter()
    fit()
    return time.perf_counter() - start


def first_fit_apart(variant: str) -> float:
    """`first_fit` in a fresh Python process (this script, `--one`)."""
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--one", variant],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def compile_times(variants: list[str], reps: int) -> dict[str, float]:
    """The median first fit of each variant, each in a process of its own,
    the variants taking turns (in one process, the first variant measured
    would also pay the process's start-up, and the later ones reuse its
    traces of Keras's own functions)."""
    times: dict[str, list[float]] = {variant: [] for variant in variants}
    for rep in range(reps):
        for variant in variants if rep % 2 == 0 else variants[::-1]:
            times[variant].append(first_fit_apart(variant))
    return {variant: statistics.median(runs) for variant, runs in times.items()}


def bench(
    variants: list[str], reps: int, steps: int, log_root: str, first_reps: int
) -> list[dict]:
    spec = MODELS["mlp"]
    x, y = spec.data(steps)
    compiled = compile_times(variants, first_reps)
    units = {}
    for variant in variants:
        log_dir = os.path.join(log_root, variant)
        units[variant] = fitter(variant, x, y, log_dir, spec.batch)
        units[variant]()  # compiles
    cpu: dict = {}
    times = interleaved_times(units, reps, cpu)
    rows = summarize(times, "A", TARGETS, cpu)
    for row in rows:
        row["model"] = "mlp (jax)"
        row["first_fit"] = compiled[row["name"]]
        row["first_fit_ratio"] = compiled[row["name"]] / compiled["A"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, help="repetitions (default 9)")
    parser.add_argument("--steps", type=int, help="steps an epoch (default 256)")
    parser.add_argument("--variants", help="comma-separated (default: all)")
    parser.add_argument("--quick", action="store_true", help="32 steps, 2 reps")
    parser.add_argument(
        "--first-reps", type=int, default=3, help="first fits of each (default 3)"
    )
    parser.add_argument("--one", metavar="VARIANT", help=argparse.SUPPRESS)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory(prefix="bench_jax_one_") as log_root:
            print(json.dumps({"seconds": first_fit(args.one, log_root)}))
        return
    steps = args.steps or (32 if args.quick else 256)
    reps = args.reps or (2 if args.quick else 9)
    variants = args.variants.split(",") if args.variants else list(VARIANTS)
    variants = variants if "A" in variants else ["A", *variants]
    print(
        f"python {platform.python_version()}, jax {jax.__version__}, keras "
        f"{keras.__version__}, keras_gradmon {keras_gradmon.__version__}, "
        f"cpus {cpu_count()}, devices {jax.devices()}; mlp, {steps} steps, "
        f"{reps} reps",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench_jax_") as log_root:
        rows = bench(variants, reps, steps, log_root, args.first_reps)
    print(format_table(rows))
    if args.markdown:
        print(format_table(rows, markdown=True))


if __name__ == "__main__":
    main()
