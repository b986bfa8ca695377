"""What the monitor costs the host a step, where a step is almost all host.

A one-layer model (Dense 4 -> 1, batch 1, SGD, `jit_compile=True`) trained
in `fit` epochs of 2,048 steps: its device work is a few microseconds, so
what a monitored step adds over a plain one is what the host does per step
(the callback's batch hooks, the program choice, and on JAX the state
arrays Keras threads through each step), plus its due steps (one in 100,
each measuring: on TensorFlow a few milliseconds, about half of the
defaults' figure there). Interleaved repetitions of:

  plain     the unwrapped optimizer, no callback: the baseline.
  defaults  GradientMonitorOptimizer at the defaults + GradientMonitorCallback
            (two or three programs chosen on the host).
  nocb      the same optimizer without the callback (one program, its
            conditional every step).
  every, every-alerts, every-nocb   statistics every step (no histograms)
            with the callback, with its alert rules on too, and without
            it: the host's part of every step measured (`--variants`).

It prints the min and median microseconds a step and the least CPU time a
step (all threads) of each, and the min overhead over plain. With
`--hooks`, also the thread CPU time of the callback's batch hooks, a call
(median over the last repetition's calls, and the mean, which holds the
due steps' reads), timed where Keras calls them (the end hook on Keras's
worker thread on JAX).

    .venv/bin/python benchmarks/bench_host.py
    KERAS_BACKEND=jax .venv/bin/python benchmarks/bench_host.py --reps 7 --hooks
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import keras
import numpy as np

import keras_gradmon

STEPS = 2048


def build(variant: str) -> tuple[keras.Model, list]:
    """The compiled model of `variant` and its callbacks."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.01)
    callbacks = []
    every = variant.startswith("every")
    options = {"every_n_steps": 1, "histogram_every_n_steps": None} if every else {}
    if variant != "plain":
        optimizer = keras_gradmon.GradientMonitorOptimizer(optimizer, **options)
    if variant in ("defaults", "every", "every-alerts"):
        log_dir = tempfile.mkdtemp(prefix="bench_host_")
        alerts = variant == "every-alerts"
        callbacks = [keras_gradmon.GradientMonitorCallback(log_dir, alerts=alerts)]
    model.compile(optimizer, "mse", jit_compile=True)
    return model, callbacks


def time_hooks(callback: Any) -> dict[str, list[int]]:
    """Wraps `callback`'s batch hooks (on the instance) to record each
    call's thread CPU time in ns, into the returned lists (cleared by the
    caller between repetitions)."""
    calls: dict[str, list[int]] = {}
    for name in ("on_train_batch_begin", "on_train_batch_end"):
        hook, times = getattr(callback, name), calls.setdefault(name, [])

        def timed(*args: Any, _hook: Any = hook, _times: list = times, **kw: Any):
            start = time.thread_time_ns()
            result = _hook(*args, **kw)
            _times.append(time.thread_time_ns() - start)
            return result

        setattr(callback, name, timed)
    return calls


def print_hooks(name: str, calls: dict[str, list[int]]) -> None:
    """The median and mean thread CPU a call of each hook in `calls`."""
    for hook, times in calls.items():
        print(
            f"  {name} {hook}: median {statistics.median(times) / 1e3:.1f} us "
            f"thread CPU a call, mean {statistics.fmean(times) / 1e3:.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--variants", default="plain,defaults,nocb")
    parser.add_argument(
        "--hooks",
        action="store_true",
        help="also time each call of the callback's batch hooks (thread CPU)",
    )
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((STEPS, 4), np.float32)
    y = rng.random((STEPS, 1), np.float32)
    names = ["plain", *(v for v in args.variants.split(",") if v != "plain")]
    runs = {name: build(name) for name in names}
    for model, callbacks in runs.values():  # compiles; past the programs' wait
        model.fit(x, y, batch_size=1, epochs=2, verbose=0, callbacks=callbacks)
    hooks = {
        name: time_hooks(callbacks[0])
        for name, (_, callbacks) in runs.items()
        if args.hooks and callbacks
    }
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.reps):
        for name, (model, callbacks) in runs.items():
            for times in hooks.get(name, {}).values():
                times.clear()  # the last repetition's calls are printed
            start, start_cpu = time.perf_counter(), time.process_time()
            model.fit(x, y, batch_size=1, epochs=1, verbose=0, callbacks=callbacks)
            wall[name].append((time.perf_counter() - start) / STEPS * 1e6)
            cpu[name].append((time.process_time() - start_cpu) / STEPS * 1e6)
    backend = keras.backend.backend()
    for name in runs:
        over = min(wall[name]) - min(wall["plain"])
        print(
            f"{backend} {name}: min {min(wall[name]):.1f} us a step, median "
            f"{statistics.median(wall[name]):.1f}, CPU min {min(cpu[name]):.1f} "
            f"(min over plain: {over:+.1f} us)"
        )
        if name in hooks:
            print_hooks(name, hooks[name])


if __name__ == "__main__":
    main()
