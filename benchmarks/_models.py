"""The models the benchmarks train, with synthetic data (no downloads).

Each entry of `MODELS` is a `Spec`: how to build the layers (a fresh model
per call, same seed, same weights), the input shape, the batch size, the
number of classes, and whether inputs are token ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import keras
import numpy as np


@dataclasses.dataclass(frozen=True)
class Spec:
    build: Callable[[], keras.Model]
    shape: tuple[int, ...]
    batch: int
    classes: int = 10
    tokens: int | None = None  # inputs are ids below this (sequence models)

    def data(self, steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """`steps` batches of inputs and labels."""
        rng = np.random.default_rng(seed)
        n = steps * self.batch
        if self.tokens:
            x = rng.integers(0, self.tokens, (n, *self.shape)).astype("int32")
        else:
            x = rng.normal(size=(n, *self.shape)).astype("float32")
        return x, rng.integers(0, self.classes, n)


def mlp() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


def conv() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10),
        ]
    )


def bn_cnn() -> keras.Model:
    layers = [keras.Input((32, 32, 3))]
    for filters in (32, 64, 128):
        layers += [
            keras.layers.Conv2D(filters, 3, padding="same", use_bias=False),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.MaxPooling2D(),
        ]
    layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
    return keras.Sequential(layers)


def transformer() -> keras.Model:
    tokens = keras.Input((32,), dtype="int32")
    h = keras.layers.Embedding(1000, 64)(tokens)
    for _ in range(2):
        attended = keras.layers.MultiHeadAttention(4, 16)(h, h)
        h = keras.layers.LayerNormalization()(h + attended)
        feed = keras.layers.Dense(128, activation="gelu")(h)
        h = keras.layers.LayerNormalization()(h + keras.layers.Dense(64)(feed))
    pooled = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(tokens, keras.layers.Dense(10)(pooled))


def recurrent() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((32,), dtype="int32"),
            keras.layers.Embedding(1000, 64),
            keras.layers.LSTM(64, return_sequences=True),
            keras.layers.GRU(64),
            keras.layers.Dense(10),
        ]
    )


def application(name: str, size: int) -> Callable[[], keras.Model]:
    """A `keras.applications` model, `weights=None` (nothing downloaded)."""

    def build() -> keras.Model:
        model = getattr(keras.applications, name)
        return model(
            weights=None,
            input_shape=(size, size, 3),
            classes=10,
            classifier_activation=None,  # logits, as the benchmarks' loss takes
        )

    return build


MODELS: dict[str, Spec] = {
    "mlp": Spec(mlp, (64,), 128),
    "conv": Spec(conv, (32, 32, 3), 64),
    "bn_cnn": Spec(bn_cnn, (32, 32, 3), 64),
    "transformer": Spec(transformer, (32,), 64, tokens=1000),
    "lstm": Spec(recurrent, (32,), 64, tokens=1000),
    "resnet50v2": Spec(application("ResNet50V2", 32), (32, 32, 3), 4),
    # The compile-time models of issue 15, at 64x64 input.
    "resnet50v2_64": Spec(application("ResNet50V2", 64), (64, 64, 3), 4),
    "efficientnetv2b0_64": Spec(application("EfficientNetV2B0", 64), (64, 64, 3), 4),
    "mobilenetv3small_64": Spec(application("MobileNetV3Small", 64), (64, 64, 3), 4),
}
