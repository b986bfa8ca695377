"""Time and memory of reading a run's event files for `keras-gradmon report`.

Builds the runs of issue 32's figures (a 9-layer MLP: 18 variables, every
step a summary, gradient histograms every 10 steps) in both layouts:

  table     the per-variable numbers as one table a step
            (`keras_gradmon/variables`, the default);
  scalars   the same numbers as scalar tags (`per_variable_scalars=True`):
            90 per-variable tags and 8 step-wide ones a step.

The files are written through keras_gradmon's own `TensorBoardRecorder`
(the tags, shapes and serialization of a real run) with synthetic values,
not by a fit, and cached under /tmp/keras_gradmon_bench_report. Each reader
then runs in a fresh subprocess, which reports its wall time, CPU time and
peak RSS (`ru_maxrss`):

  before        the report's reader at commit 9bb7f2b (extracted with
                `git archive` next to the cache);
  now           `keras_gradmon.report.events.load_runs`;
  tensorboard   TensorBoard's `EventAccumulator` (everything kept).

and the memory run reads a 100k-step table run with `before` and `now`
(TensorBoard's reader would keep every value: about 8 GB). Wall and CPU
time include each child's imports (about 0.3 s of `now`'s).

With `--fit`, the runs are instead written by a real `fit` in the issue's
configuration (`fit-table` and `fit-scalars`, `--fit-steps` steps, default
10,000): the 9-layer MLP under `GradientMonitorOptimizer(every_n_steps=1,
histogram_every_n_steps=10)` and `GradientMonitorCallback`, in the default
table layout and with `per_variable_scalars=True` (the old layout), cached
under /tmp/keras_gradmon_bench_report/fit_<layout>_<steps>.

Run from the repository root:

    .venv/bin/python benchmarks/bench_report.py
    .venv/bin/python benchmarks/bench_report.py --fit
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

CACHE = "/tmp/keras_gradmon_bench_report"
BEFORE = "9bb7f2b"
LAYERS = 9
HISTOGRAM_EVERY = 10
COLUMNS = (
    "grad_present",
    "grad_norm",
    "grad_max_abs",
    "grad_nonfinite",
    "weight_norm",
    "update_ratio",
)
TOTALS = (
    "grad_norm/global",
    "grad_nonfinite/global",
    "update_ratio/global",
    "clip/fraction",
    "spikes/max_norm",
    "spikes/max_step",
    "skipped/steps",
    "loss",
)


def _variables() -> tuple[str, ...]:
    return tuple(
        f"mlp/dense_{i}/{kind}" for i in range(LAYERS) for kind in ("kernel", "bias")
    )


def build(path: str, steps: int, layout: str) -> None:
    """Writes a run of `steps` steps in `layout` to `path` (once)."""
    from keras_gradmon.columns import Table
    from keras_gradmon.recorders.tensorboard import TensorBoardRecorder

    done = os.path.join(path, "done")
    if os.path.exists(done):
        return
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(0)
    rows = _variables()
    recorder = TensorBoardRecorder(path)
    edges = np.linspace(-1.0, 1.0, 31)
    block = 1000
    for start in range(0, steps, block):
        values = rng.lognormal(size=(block, len(rows), len(COLUMNS))).astype(np.float32)
        values[:, :, 0], values[:, :, 3] = 1.0, 0.0
        totals = rng.lognormal(size=(block, len(TOTALS))).astype(np.float32)
        for i, step in enumerate(range(start, min(start + block, steps))):
            scalars = dict(zip(TOTALS, totals[i].tolist()))
            table = Table(rows, COLUMNS, values[i])
            if layout == "table":
                recorder.write_table(table, step)
            else:
                scalars.update(table.scalars())
            recorder.write_scalars(scalars, step)
            if step % HISTOGRAM_EVERY == 0:
                counts = rng.integers(0, 100, 30).astype(np.float64)
                buckets = np.stack([edges[:-1], edges[1:], counts], axis=1)
                recorder.write_histograms(
                    {f"grad_hist/{row}": buckets for row in rows}, step
                )
    recorder.close()
    open(done, "w").close()


def build_fit(path: str, steps: int, layout: str) -> None:
    """Writes a run of `steps` steps by a real `fit` of the 9-layer MLP in
    `layout` ("table", or "scalars": `per_variable_scalars=True`), once."""
    done = os.path.join(path, "done")
    if os.path.exists(done):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    from keras_gradmon import GradientMonitorCallback, GradientMonitorOptimizer

    keras.utils.set_random_seed(0)
    layers = [keras.layers.Dense(32, activation="relu") for _ in range(LAYERS - 1)]
    model = keras.Sequential([keras.Input((16,)), *layers, keras.layers.Dense(1)])
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(1e-3),
        every_n_steps=1,
        histogram_every_n_steps=HISTOGRAM_EVERY,
        per_variable_scalars=layout == "scalars",
    )
    model.compile(optimizer, "mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * 8, 16)).astype(np.float32)
    y = rng.normal(size=(steps * 8, 1)).astype(np.float32)
    callback = GradientMonitorCallback(path)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[callback])
    open(done, "w").close()


def _before() -> str:
    """The package at commit `BEFORE`, extracted once."""
    where = os.path.join(CACHE, f"before_{BEFORE}")
    if not os.path.isdir(where):
        os.makedirs(where)
        archive = subprocess.run(
            ["git", "archive", BEFORE, "keras_gradmon"], check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", where], input=archive.stdout, check=True)
    return where


def child(reader: str, path: str) -> None:
    """Reads `path` with `reader`; prints the figures as JSON."""
    start, cpu = time.perf_counter(), time.process_time()
    if reader == "tensorboard":
        from tensorboard.backend.event_processing import event_accumulator as ea

        guidance = {ea.SCALARS: 0, ea.TENSORS: 0, ea.HISTOGRAMS: 0}
        accumulator = ea.EventAccumulator(path, size_guidance=guidance)
        accumulator.Reload()
        tags = len(accumulator.Tags()["tensors"])
    else:
        from keras_gradmon.report.events import load_runs

        (run,) = load_runs(path)
        tags = len(run.scalars)
    figures = {
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "tags": tags,
    }
    print(json.dumps(figures))


def measure(reader: str, path: str) -> dict:
    """`child` in a fresh interpreter (the package of `reader`)."""
    root = _before() if reader == "before" else os.getcwd()
    env = {**os.environ, "PYTHONPATH": root, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, __file__, "--child", reader, path],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"{reader} on {path} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _size_mb(path: str) -> float:
    names = [n for n in os.listdir(path) if n.startswith("events.out")]
    return sum(os.path.getsize(os.path.join(path, n)) for n in names) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", nargs=2, metavar=("READER", "PATH"))
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--memory-steps", type=int, default=100_000)
    parser.add_argument("--readers", default="before,now,tensorboard")
    parser.add_argument("--memory-readers", default="before,now")
    parser.add_argument("--fit", action="store_true", help="runs written by fit")
    parser.add_argument("--build-fit", nargs=3, metavar=("PATH", "STEPS", "LAYOUT"))
    parser.add_argument("--fit-steps", type=int, default=10_000)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.build_fit:  # in a child of its own: the parent's RSS stays small
        build_fit(args.build_fit[0], int(args.build_fit[1]), args.build_fit[2])
        return
    print("| run | MB | reader | wall s | CPU s | peak RSS MB | tags |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    if args.fit:
        for layout in ("table", "scalars"):
            path = os.path.join(CACHE, f"fit_{layout}_{args.fit_steps}")
            started = time.perf_counter()
            command = [sys.executable, __file__, "--build-fit", path]
            subprocess.run([*command, str(args.fit_steps), layout], check=True)
            print(f"(built {path} in {time.perf_counter() - started:.0f} s)")
            for reader in args.readers.split(","):
                f = measure(reader, path)
                print(
                    f"| fit-{layout}, {args.fit_steps:,} steps | {_size_mb(path):.0f} "
                    f"| {reader} | {f['wall_s']:.1f} | {f['cpu_s']:.1f} "
                    f"| {f['peak_rss_mb']:.0f} | {f['tags']} |",
                    flush=True,
                )
        return
    runs = [(layout, args.steps) for layout in ("table", "scalars")]
    runs.append(("table", args.memory_steps))
    for layout, steps in runs:
        path = os.path.join(CACHE, f"{layout}_{steps}")
        build(path, steps, layout)
        memory_run = steps == args.memory_steps and steps != args.steps
        readers = (args.memory_readers if memory_run else args.readers).split(",")
        for reader in readers:
            f = measure(reader, path)
            print(
                f"| {layout}, {steps:,} steps | {_size_mb(path):.0f} | {reader} "
                f"| {f['wall_s']:.1f} | {f['cpu_s']:.1f} | {f['peak_rss_mb']:.0f} "
                f"| {f['tags']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
