"""Compile time: the first `model.fit` of a variant, each in a fresh process.

What a user pays before the first step: tracing, graph building and XLA
compilation of the train step, plain (`A`) and wrapped (the variants of
`bench_keras.py`; `full` is every feature: statistics every step,
histograms every 100, groups and global-norm clipping). Each measurement
runs in a process of its own (after a one-step warm-up fit of a small MLP,
so the process's own start-up is not counted), because in one long-lived
process the graphs of the variants measured before slow down the tracing of
the next (Python's garbage collector walks every live object). The
processes of the variants take turns, `--reps` times; the first fit is 2
steps of the model's batch.

Issue 15's target: `full` at most 1.3x `A` for ResNet50V2,
EfficientNetV2B0 and MobileNetV3Small at 64x64 input. Issue 31's: the
defaults at most 1.3x `A`, on TensorFlow with XLA and on JAX (`--backend
jax`: the variants of `bench_jax.py`, its warm-up the plain MLP's fit).

Run from the repository root on an otherwise idle machine:

    .venv/bin/python benchmarks/bench_compile.py
    .venv/bin/python benchmarks/bench_compile.py --models mobilenetv3small_64 \
        --variants A,B,full
    .venv/bin/python benchmarks/bench_compile.py --backend jax \
        --models resnet50v2_64 --variants A,defaults
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODELS = "resnet50v2_64,efficientnetv2b0_64,mobilenetv3small_64"
TARGET = 1.3


def first_fit(model: str, variant: str, backend: str = "tensorflow") -> float:
    """Seconds of the first fit (2 steps) of `variant` on `model`, in this
    process, after a warm-up fit (Keras on `backend`: TensorFlow with XLA,
    or JAX with `bench_jax.py`'s variants)."""
    import keras
    from _models import MODELS as SPECS

    log_dir = os.path.join("/tmp", f"bench_compile_{os.getpid()}")
    if keras.backend.backend() != backend:
        raise RuntimeError(f"Keras runs on {keras.backend.backend()}, not {backend}")
    if backend == "jax":
        from bench_jax import first_fit as jax_first_fit

        return jax_first_fit(variant, log_dir, model, batches=2)
    from bench_keras import epoch_runner, warm_up

    warm_up()
    spec = SPECS[model]
    x, y = spec.data(2)
    keras.utils.set_random_seed(0)
    one_epoch = epoch_runner(variant, spec, x, y, log_dir)
    start = time.perf_counter()
    one_epoch()
    return time.perf_counter() - start


def measure(model: str, variant: str, backend: str = "tensorflow") -> float:
    """`first_fit` in a fresh Python process."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(here, "bench_compile.py"),
            "--one",
            model,
            variant,
            "--backend",
            backend,
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": backend},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--variants", default="A,full")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "VARIANT"))
    parser.add_argument(
        "--backend", choices=("tensorflow", "jax"), default="tensorflow"
    )
    args = parser.parse_args()
    if args.one:
        print(json.dumps({"seconds": first_fit(*args.one, args.backend)}))
        return
    variants = args.variants.split(",")
    print("| model | variant | first fit s (median) | runs | ratio | target | pass |")
    print("| --- | --- | ---: | --- | ---: | ---: | :---: |")
    for model in args.models.split(","):
        times: dict[str, list[float]] = {v: [] for v in variants}
        for rep in range(args.reps):
            order = variants if rep % 2 == 0 else variants[::-1]
            for variant in order:
                times[variant].append(measure(model, variant, args.backend))
        base = statistics.median(times["A"])
        for variant in variants:
            median = statistics.median(times[variant])
            ratio = median / base
            verdict = (
                "-" if variant != "full" else ("pass" if ratio <= TARGET else "FAIL")
            )
            runs = ", ".join(f"{t:.1f}" for t in times[variant])
            target = f"<= {TARGET}x" if variant == "full" else "-"
            print(
                f"| {model} | {variant} | {median:.1f} | {runs} | {ratio:.2f}x "
                f"| {target} | {verdict} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
