"""Weight-sized copies in the optimized HLO of a JAX train step (issue 31).

Compiles the MLP 64-512-512-10's train step as Keras's trainer jits it
(`donate_argnums=0`): unwrapped, wrapped (the measuring program: the
monitor's conditional inside) and wrapped under `measuring(False)` (the
program `fit` runs on steps with nothing due), and prints each one's `copy`
instructions of a weight's shape and its conditionals.

    .venv/bin/python benchmarks/hlo_copies_jax.py
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"

import re

import jax
import keras
import numpy as np

import keras_gradmon
from keras_gradmon.schedule import measuring

WEIGHTS = {"64,512", "512", "512,512", "512,10", "10"}


def optimized_hlo(optimizer, measures: bool = True) -> str:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(512, activation="relu"),
         keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)]
    )  # fmt: skip
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=True)
    x = np.random.rand(128, 64).astype("float32")
    y = np.random.randint(0, 10, 128)
    model.fit(x, y, batch_size=128, verbose=0)
    state = model._get_jax_state(
        trainable_variables=True, non_trainable_variables=True,
        optimizer_variables=True, metrics_variables=True,
    )  # fmt: skip
    with measuring(measures):
        step = jax.jit(lambda *args: model.train_step(*args), donate_argnums=0)
        return step.lower(state, (x, y)).compile().as_text()


def main() -> None:
    def wrapped():
        return keras_gradmon.GradientMonitorOptimizer(keras.optimizers.Adam(1e-3))

    programs = {
        "unwrapped": optimized_hlo(keras.optimizers.Adam(1e-3)),
        "measuring": optimized_hlo(wrapped()),
        "idle": optimized_hlo(wrapped(), measures=False),
    }
    for name, text in programs.items():
        shapes = re.findall(r"= f32\[([0-9,]*)\]\{[^}]*\} copy\(", text)
        copies = [s for s in shapes if s in WEIGHTS]
        instructions = len(re.findall(r"^\s+%\S+ = ", text, re.M))
        print(
            f"{name:10s} weight copies {len(copies)} {copies}, conditionals "
            f"{text.count(' conditional(')}, instructions {instructions}"
        )


if __name__ == "__main__":
    main()
