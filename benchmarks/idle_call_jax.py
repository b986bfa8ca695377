"""The host's time for one call of the idle program on JAX (issue 31).

`fit`'s idle program (`keras_gradmon.programs`) is jitted without the
optimizer variables its step passes through untouched
(`keras_gradmon.backend.jax.LeanStep`: the monitor's 6 state arrays at the
defaults). This times a call of it against the same step jitted as Keras
does, every array in and out, alternating blocks of 2,000 calls on one
model's state, for the one-layer model of `bench_host.py` (a step of a few
microseconds of device work, so a call is the host's time). Prints the min
and median microseconds a call of each.

    .venv/bin/python benchmarks/idle_call_jax.py --reps 15
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"

import argparse
import statistics
import time
from collections.abc import Callable, Iterator

import jax
import keras
import numpy as np

import keras_gradmon
from keras_gradmon import programs
from keras_gradmon.backend import jax as jax_backend

CALLS = 2000


def idle_functions() -> tuple[dict[str, Callable], tuple]:
    """The lean and the full idle train functions of one wrapped model, and
    its trainer state."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = keras_gradmon.GradientMonitorOptimizer(keras.optimizers.SGD(0.01))
    model.compile(optimizer, "mse", jit_compile=True)
    x, y = np.ones((8, 4), "float32"), np.ones((8, 1), "float32")
    model.fit(x, y, batch_size=1, verbose=0)  # builds the state
    lean = programs._function(model, False)
    made = jax_backend.lean_train_function
    jax_backend.lean_train_function = lambda model, step: None  # Keras's jit
    try:
        full = programs._function(model, False)
    finally:
        jax_backend.lean_train_function = made
    state = model._get_jax_state(
        trainable_variables=True,
        non_trainable_variables=True,
        optimizer_variables=True,
        metrics_variables=True,
    )
    return {"lean": lean, "full": full}, state


def batches() -> Iterator[tuple]:
    batch = (jax.numpy.ones((1, 4)), jax.numpy.ones((1, 1)))
    while True:
        yield batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    functions, state = idle_functions()
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(args.reps):
        for name, function in functions.items():
            data = batches()
            for _ in range(50):  # compiles on the first rep
                _, state = function(state, data)
            jax.block_until_ready(state)
            start = time.perf_counter()
            for _ in range(CALLS):
                _, state = function(state, data)
            jax.block_until_ready(state)
            times[name].append((time.perf_counter() - start) / CALLS * 1e6)
    held = len(functions["lean"].lean_step.held)
    print(f"optimizer variables: {len(state[2])}, held on the host: {held}")
    for name, values in times.items():
        print(
            f"{name}: min {min(values):.1f} us a call, "
            f"median {statistics.median(values):.1f}"
        )


if __name__ == "__main__":
    main()
