"""The first call of a train step: tracing and first run, in fresh processes.

What a user feels before training starts, where Keras `fit` runs without
XLA (its CPU default) and where tf-agents runs (never XLA): the first call
of a `tf.function` train step written in a file, as a custom training loop
writes it (`tape.gradient`, then `optimizer.apply`). AutoGraph converts the
library functions that such a step calls (unless the library stops it), so
the step is defined here, in a script file, and every measurement runs in a
process of its own (in one long-lived process, the graphs traced before
slow down the next tracing, and AutoGraph's cache would hide conversions).

Variants (Adam inside each):

  plain     unwrapped Adam: the baseline.
  wrapped   GradientMonitorOptimizer, statistics every 100 steps.
  hist      the same with histograms every 100 steps.

Modes: `noxla` (`tf.function`) and `xla` (`tf.function(jit_compile=True)`).
Each process first traces and runs a small unrelated function (the
process's own start-up is not counted), then times `get_concrete_function`
(tracing; twice, as TensorFlow traces a function that creates variables:
the optimizer's) and the first call (graph optimization or XLA compilation,
and one step), wall time and CPU time (`time.process_time`). Variants take
turns, `--reps` times.

Targets (issue 19): without XLA, a wrapped step adds at most 0.5 s to
trace + first run on the MLP, and costs at most 1.3x plain on ResNet50V2
(64x64 input, batch 4, `weights=None`).

Run from the repository root:

    .venv/bin/python benchmarks/bench_first_step.py                 # all
    .venv/bin/python benchmarks/bench_first_step.py --models mlp --modes noxla
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "plain": None,
    "wrapped": {"every_n_steps": 100, "histogram_every_n_steps": None},
    "hist": {"every_n_steps": 100, "histogram_every_n_steps": 100},
}
#: (model, mode) -> ("added", seconds) or ("ratio", times plain), for wrapped.
TARGETS = {
    ("mlp", "noxla"): ("added", 0.5),
    ("resnet50v2_64", "noxla"): ("ratio", 1.3),
}


def first_step(model_name: str, variant: str, mode: str) -> dict:
    """Seconds (and CPU seconds) of the first call of a train step, here."""
    import keras
    import tensorflow as tf
    from _models import MODELS

    import keras_gradmon

    _warm_up(tf, mode == "xla")
    spec = MODELS[model_name]
    keras.utils.set_random_seed(0)
    model = spec.build()
    optimizer = keras.optimizers.Adam(1e-3)
    if VARIANTS[variant] is not None:
        optimizer = keras_gradmon.GradientMonitorOptimizer(
            optimizer, **VARIANTS[variant]
        )
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(jit_compile=mode == "xla")
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    x, y = (tf.constant(a) for a in spec.data(1))
    start, cpu = time.perf_counter(), time.process_time()
    concrete = train_step.get_concrete_function(x, y)
    traced = time.perf_counter()
    train_step(x, y).numpy()
    graph = concrete.graph.as_graph_def()
    return {
        "trace": traced - start,
        "first_run": time.perf_counter() - traced,
        "total": time.perf_counter() - start,
        "cpu": time.process_time() - cpu,
        "nodes": len(graph.node) + sum(len(f.node_def) for f in graph.library.function),
    }


def _warm_up(tf, xla: bool) -> None:
    """Traces and runs a small function, so that the process's one-time
    start-up does not land in the first measurement."""

    @tf.function(jit_compile=xla)
    def small(x):
        return tf.reduce_sum(tf.nn.relu(tf.matmul(x, x)))

    small(tf.ones([8, 8])).numpy()


def measure(model: str, variant: str, mode: str) -> dict:
    """`first_step` in a fresh Python process."""
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--one", model, variant, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def rows_of(model: str, mode: str, runs: dict[str, list[dict]]) -> list[str]:
    """Markdown rows: medians, ratios to plain, the target's verdict."""
    base = runs["plain"]
    base_total = statistics.median(r["total"] for r in base)
    rows = []
    for variant, results in runs.items():
        totals = [r["total"] for r in results]
        median = statistics.median(totals)
        cpu_ratio = statistics.median(r["cpu"] for r in results) / statistics.median(
            r["cpu"] for r in base
        )
        target, verdict = _verdict(model, mode, variant, median, base_total)
        trace = statistics.median(r["trace"] for r in results)
        first = statistics.median(r["first_run"] for r in results)
        rows.append(
            f"| {model} | {mode} | {variant} | {trace:.2f} | {first:.2f} "
            f"| {median:.2f} | {median - base_total:+.2f} "
            f"| {median / base_total:.2f}x "
            f"| {min(totals) / min(r['total'] for r in base):.2f}x "
            f"| {cpu_ratio:.2f}x | {results[0]['nodes']} | {target} | {verdict} |"
        )
    return rows


def _verdict(
    model: str, mode: str, variant: str, median: float, base: float
) -> tuple[str, str]:
    kind, limit = TARGETS.get((model, mode), (None, None))
    if kind is None or variant == "plain":
        return "-", "-"
    value = median - base if kind == "added" else median / base
    target = f"<= +{limit} s" if kind == "added" else f"<= {limit}x"
    return target, "pass" if value <= limit else "FAIL"


HEADER = (
    "| model | mode | variant | trace s | first run s | trace + first run s "
    "| added s | ratio (median) | ratio (min/min) | CPU ratio | graph nodes "
    "| target | verdict |\n"
    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
    "| ---: | :---: |"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,resnet50v2_64")
    parser.add_argument("--modes", default="noxla,xla")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "VARIANT", "MODE"))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(first_step(*args.one)))
        return
    variants = args.variants.split(",")
    print(HEADER, flush=True)
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            runs: dict[str, list[dict]] = {v: [] for v in variants}
            for rep in range(args.reps):
                for variant in variants if rep % 2 == 0 else variants[::-1]:
                    runs[variant].append(measure(model, variant, mode))
            print("\n".join(rows_of(model, mode, runs)), flush=True)


if __name__ == "__main__":
    main()
