"""Small real models and data for the JAX adapter's tests: a conv net with
batch normalization (non-trainable state that the JAX trainer threads too),
its data, and the same model built twice with the same weights."""

from __future__ import annotations

import keras
import numpy as np


def conv_net(seed: int = 0) -> keras.Model:
    """Conv -> BatchNorm -> ReLU -> pool -> Dense -> Dense(3), seeded."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Conv2D(8, 3, padding="same"),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(3),
        ]
    )


def data(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`count` images and integer labels."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(count, 8, 8, 3)).astype("float32")
    return x, rng.integers(0, 3, size=count).astype("int32")


def compiled(optimizer: keras.optimizers.Optimizer, seed: int = 0) -> keras.Model:
    """`conv_net(seed)` compiled with `optimizer` and a cross-entropy loss."""
    model = conv_net(seed)
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def states_equal(a: list, b: list) -> bool:
    """Whether two lists of arrays are equal bit for bit."""
    return len(a) == len(b) and all(
        np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
        for x, y in zip(a, b)
    )
