"""Where the JAX measuring program's compile goes, feature by feature.

For a model of `_models.py` (the MLP 64-512-512-10 by default), lowers the
train step that a `fit`'s first call compiles (the measuring program) with
the monitor's features taken away one at a time, and prints for each: the
StableHLO ops of the lowered step, the fusions of the compiled one, its
kernels (the top-level instructions XLA:CPU launches one by one: fusions,
copies, scatters, sorts, custom calls; each costs a few microseconds to
launch whatever its size), and the compile's wall and CPU seconds (one
compile each: XLA's own cache would answer a second). The first row is
the unwrapped step. With `--every`, the features are measured at every
step instead (the program of `every_n_steps=1`, no conditional).

    .venv/bin/python benchmarks/compile_parts_jax.py
    .venv/bin/python benchmarks/compile_parts_jax.py --model resnet50v2_64
    .venv/bin/python benchmarks/compile_parts_jax.py --every
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"

import argparse
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


#: The instructions of a program that are no kernel of their own.
_NOT_KERNELS = {"parameter", "constant", "bitcast", "tuple", "get-tuple-element"}


def lowered(options: dict | None, x, y, model_name: str = "mlp"):
    """The jitted train step of a fresh `model_name` wrapped with `options`,
    lowered for one batch (its optimizer built on its variables)."""
    spec = MODELS[model_name]
    keras.utils.set_random_seed(0)
    model = spec.build()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(make_optimizer(options), loss)
    model.optimizer.build(model.trainable_variables)
    groups = (
        model.trainable_variables,
        model.non_trainable_variables,
        model.optimizer.variables,
        model.metrics_variables,
    )
    state = tuple([v.value for v in group] for group in groups)
    step = jax.jit(lambda s, d: model.train_step(s, d), donate_argnums=0)
    return step.lower(state, (x, y))


def kernels(text: str, branches: bool = True) -> int:
    """The kernels of the optimized HLO `text`: of its entry computation
    (what every call launches) and, with `branches`, of every conditional's
    (and loop's) computations under it."""
    bodies = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^(?:ENTRY )?%(\S+) .*?\{\n(.*?)^\}", text, re.M | re.S)
    }
    [entry] = re.findall(r"^ENTRY %(\S+)", text, re.M)
    called = r"(?:branch_computations=\{([^}]*)\}|(?:true|false)_computation=%(\S+?),"
    called += r"|body=%(\S+?),|condition=%(\S+?),)"
    count, todo, seen = 0, [entry], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        body = bodies[name]
        ops = re.findall(r"^\s*(?:ROOT )?%\S+ = .*? ([a-z][\w-]*)\(", body, re.M)
        count += sum(op not in _NOT_KERNELS for op in ops)
        for groups in re.findall(called, body) if branches else []:
            todo += [n.strip().lstrip("%") for g in groups for n in g.split(",") if n]
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp", choices=sorted(MODELS))
    parser.add_argument("--every", action="store_true")
    args = parser.parse_args()
    spec = MODELS[args.model]
    x, y = spec.data(1)
    x, y = x[: spec.batch], y[: spec.batch]
    print(
        "| program | StableHLO ops | fusions | kernels (entry) | kernels (all) "
        "| compile s | compile CPU s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, options in ROWS:
        if args.every and options is not None:
            options = {**options, "every_n_steps": 1}
        low = lowered(options, x, y, args.model)
        ops = len(re.findall(r"= \"?(?:stablehlo|chlo|func)\.", low.as_text()))
        wall, cpu = time.perf_counter(), time.process_time()
        compiled = low.compile()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        text = compiled.as_text()
        fusions, entry = text.count(" fusion("), kernels(text, False)
        count = kernels(text)
        print(
            f"| {label} | {ops} | {fusions} | {entry} | {count} | {wall:.2f} "
            f"| {cpu:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
