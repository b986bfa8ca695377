"""Where the JAX measuring program's compile goes, feature by feature.

For the MLP 64-512-512-10 (`_models.py`), lowers the train step that a
`fit`'s first call compiles (the measuring program) with the monitor's
features taken away one at a time, and prints for each: the StableHLO ops
of the lowered step, the fusions of the compiled one, and the compile's
wall and CPU seconds (one compile each: XLA's own cache would answer a
second). The first row is the unwrapped step.

    .venv/bin/python benchmarks/compile_parts_jax.py
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"

import re
import time

import jax
import keras
from _models import MODELS
from _signals import make_optimizer

NO_HISTOGRAMS = {"every_n_steps": 100, "histogram_every_n_steps": None}
NO_UPDATES = {**NO_HISTOGRAMS, "update_statistics": False}
GRADIENTS = {**NO_UPDATES, "weight_statistics": False}
ROWS = [
    ("plain", None),
    ("the defaults", {"every_n_steps": 100}),
    ("no histograms", NO_HISTOGRAMS),
    ("and no update ratios", NO_UPDATES),
    ("and no weight statistics", GRADIENTS),
    ("and the norm only", {**GRADIENTS, "statistics": ("norm",)}),
]


def lowered(options: dict | None, x, y):
    """The jitted train step of a fresh MLP wrapped with `options`, lowered
    for one batch (after a one-batch fit builds its state)."""
    spec = MODELS["mlp"]
    keras.utils.set_random_seed(0)
    model = spec.build()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(make_optimizer(options), loss)
    model.fit(x, y, batch_size=len(x), epochs=1, verbose=0)
    groups = (
        model.trainable_variables,
        model.non_trainable_variables,
        model.optimizer.variables,
        model.metrics_variables,
    )
    state = tuple([v.value for v in group] for group in groups)
    step = jax.jit(lambda s, d: model.train_step(s, d), donate_argnums=0)
    return step.lower(state, (x, y))


def main() -> None:
    spec = MODELS["mlp"]
    x, y = spec.data(1)
    x, y = x[: spec.batch], y[: spec.batch]
    print("| program | StableHLO ops | fusions | compile s | compile CPU s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, options in ROWS:
        low = lowered(options, x, y)
        ops = len(re.findall(r"= \"?(?:stablehlo|chlo|func)\.", low.as_text()))
        wall, cpu = time.perf_counter(), time.process_time()
        compiled = low.compile()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        fusions = compiled.as_text().count(" fusion(")
        print(f"| {label} | {ops} | {fusions} | {wall:.2f} | {cpu:.2f} |", flush=True)


if __name__ == "__main__":
    main()
