"""The scenarios' models and data: small, seeded, made here (no download),
each learnable so that a healthy run converges."""

from __future__ import annotations

import keras
import numpy as np

TOKENS, LENGTH = 16, 16


def random_labels(
    seed: int = 0, n: int = 12_800, features: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian inputs with random labels out of 10: only memorized."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype("float32")
    return x, rng.integers(0, 10, n).astype("int32")


def soak_mlp(seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


def largest_token(seed: int = 0, n: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Sequences of tokens; the label is the largest token of each."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, TOKENS, (n, LENGTH)).astype("int32")
    return x, x.max(axis=1).astype("int32")


def transformer(seed: int = 0, width: int = 32) -> keras.Model:
    """Token and position embeddings, one post-norm attention block, mean
    pooling and a softmax head."""
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((LENGTH,), dtype="int32")
    positions = keras.ops.arange(LENGTH)
    h = keras.layers.Embedding(TOKENS, width)(tokens)
    h = h + keras.layers.Embedding(LENGTH, width)(positions)
    attended = keras.layers.MultiHeadAttention(4, width // 4)(h, h)
    h = keras.layers.LayerNormalization()(h + attended)
    ffn = keras.layers.Dense(2 * width, activation="relu")(h)
    h = keras.layers.LayerNormalization()(h + keras.layers.Dense(width)(ffn))
    pooled = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(tokens, keras.layers.Dense(TOKENS)(pooled))


def quadrant_images(seed: int = 0, n: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """16x16 noisy images with a bright 4x4 square in one quadrant (the
    label), at a random place inside it."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 0.5, (n, 16, 16, 1)).astype("float32")
    y = rng.integers(0, 4, n).astype("int32")
    rows, cols = rng.integers(0, 5, n), rng.integers(0, 5, n)
    for i in range(n):
        top, left = 8 * (y[i] // 2) + rows[i], 8 * (y[i] % 2) + cols[i]
        x[i, top : top + 4, left : left + 4] += 1.5
    return x, y


def bn_cnn(seed: int = 0) -> keras.Model:
    """Two conv-BatchNorm-ReLU-pool stages and a dense head."""
    keras.utils.set_random_seed(seed)
    layers = keras.layers
    stages = []
    for filters in (16, 32):
        stages += [
            layers.Conv2D(filters, 3, padding="same", use_bias=False),
            layers.BatchNormalization(),
            layers.ReLU(),
            layers.MaxPooling2D(),
        ]
    return keras.Sequential(
        [keras.Input((16, 16, 1)), *stages, layers.Flatten(), layers.Dense(4)]
    )


def sequence_sums(seed: int = 0, n: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Sequences of 20 Gaussian numbers; the target is their sum / sqrt(20)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 20, 1)).astype("float32")
    return x, (x.sum(axis=(1, 2)) / np.sqrt(20.0)).astype("float32")[:, None]


def lstm(seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((20, 1)), keras.layers.LSTM(32), keras.layers.Dense(1)]
    )


def linear_targets(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian inputs and a linear function of them."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")
    return x, (x @ rng.normal(size=(8, 1))).astype("float32")


def regression_mlp(seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1),
        ]
    )


def sigmoid_stack(depth: int = 12, seed: int = 0) -> keras.Model:
    """`depth` Dense(32, sigmoid) layers and a 10-way head."""
    keras.utils.set_random_seed(seed)
    hidden = [
        keras.layers.Dense(32, activation="sigmoid", name=f"sigmoid_{i}")
        for i in range(depth)
    ]
    head = keras.layers.Dense(10, name="head")
    return keras.Sequential([keras.Input((32,)), *hidden, head], name="stack")
