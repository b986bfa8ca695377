"""Small models and data shared by the tests."""

from __future__ import annotations

import keras
import numpy as np


def mlp(seed: int = 0, features: int = 8) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(16, activation="relu", name="hidden"),
            keras.layers.Dense(3, name="head"),
        ],
        name="mlp",
    )


def data(n: int = 64, features: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype("float32")
    y = rng.integers(0, 3, n).astype("int32")
    return x, y


LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def gradients(model: keras.Model, x, y) -> list[np.ndarray]:
    """Reference gradients of LOSS at the model's current weights."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss = LOSS(y, model(x, training=True))
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
