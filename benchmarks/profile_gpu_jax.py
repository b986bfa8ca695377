"""Where a monitored step spends its time on a GPU (Keras 3 on JAX).

JAX's profiler traces one fit of `--steps` steps of `bench_gpu_jax.py`'s
25M decoder for each variant (after its programs are compiled); the trace
is read back with `jax.profiler.ProfileData` and the device's kernel time
is summed by kernel name. Printed per variant, per step: the wall time,
the device's busy time (the union of its kernels' intervals on all streams)
and the kernels' summed time; then the kernels that take the most time in
the last variant beyond the first. Variants as in `bench_gpu_jax.py`
(`B@256` too).

    python benchmarks/profile_gpu_jax.py --variants A,B,B@256 --steps 32
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import argparse
import collections
import glob
import tempfile
import time

import jax
import keras
from bench_gpu_jax import VARIANTS, build, data, settle, unpacking, variant

from keras_gradmon import GradientMonitorCallback


def device_events(trace_dir: str) -> list[tuple[str, float, float]]:
    """(name, start ns, duration ns) of every event on the device planes."""
    [path] = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    profile = jax.profiler.ProfileData.from_file(path)
    events = []
    for plane in profile.planes:
        if not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            if "stream" not in line.name.lower():
                continue
            for event in line.events:
                events.append((event.name, event.start_ns, event.duration_ns))
    return events


def busy(events: list[tuple[str, float, float]]) -> float:
    """Nanoseconds in which at least one kernel ran."""
    total, end = 0.0, float("-inf")
    for _, start, duration in sorted(events, key=lambda e: e[1]):
        stop = start + duration
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def profile(size: str, name: str, steps: int, root: str) -> dict:
    options, alone = variant(name, VARIANTS)
    batch = data(size, 1)[0].shape[0]
    x, y = data(size, steps)
    model = build(size, options)
    log_dir = f"{root}/{name.replace('@', '_')}"
    callbacks = [] if options is None else [GradientMonitorCallback(log_dir)]

    def fit(n: int | None = None) -> None:
        with unpacking(alone):
            model.fit(x[:n], y[:n], batch_size=batch, verbose=0, callbacks=callbacks)

    fit(batch)
    settle(model, fit)
    trace = os.path.join(root, f"trace_{name.replace('@', '_')}")
    start = time.perf_counter()
    with jax.profiler.trace(trace):
        fit()
    wall = time.perf_counter() - start
    events = device_events(trace)
    kernels = collections.Counter()
    for name, _, duration in events:
        kernels[name] += duration
    return {
        "wall": wall,
        "busy": busy(events),
        "kernels": kernels,
        "count": len(events),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="25M")
    parser.add_argument("--variants", default="A,B")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    keras.config.set_dtype_policy("mixed_bfloat16")
    results = {}
    with tempfile.TemporaryDirectory(prefix="profile_gpu_") as root:
        for name in args.variants.split(","):
            results[name] = r = profile(args.size, name, args.steps, root)
            per = 1e6 * args.steps
            kernels = sum(r["kernels"].values()) / per
            print(
                f"{name}: wall {r['wall'] * 1e3 / args.steps:.2f} ms/step, device "
                f"busy {r['busy'] / per:.2f} ms, kernels {kernels:.2f} ms, "
                f"{r['count'] / args.steps:.0f} kernels a step",
                flush=True,
            )
    first, last = (results[v] for v in (args.variants.split(",")[0], name))
    extra = last["kernels"].copy()
    extra.subtract(first["kernels"])
    print(f"kernels, us a step, {name} beyond the first variant:")
    for kernel, ns in extra.most_common(args.top):
        print(f"{ns / 1e3 / args.steps:9.1f}  {kernel[:150]}")


if __name__ == "__main__":
    main()
