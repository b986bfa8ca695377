"""Models with known activations, in the three Keras 3 styles, and the
NumPy float64 references a snapshot of them is checked against (on the
TensorFlow and the JAX backend)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_gradmon.activations.probe import ACTIVATION_STATISTICS
from tests.reference import reference_histogram

FEATURES = 6
#: Units of `h1` given a large negative bias: dead on every input.
DEAD = [1, 4, 6]


def probe_data(n: int = 128, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, FEATURES)).astype("float32")


def _kill_units(layer: keras.layers.Dense, units: list[int]) -> None:
    kernel, bias = layer.get_weights()
    bias[units] = -1e3
    layer.set_weights([kernel, bias])


def sequential(seed: int = 0) -> keras.Model:
    """relu -> tanh -> sigmoid -> linear head; `h1`'s DEAD units are dead."""
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(8, activation="relu", name="h1"),
            # A large init scale so that some tanh/sigmoid outputs saturate.
            keras.layers.Dense(
                6,
                activation="tanh",
                name="h2",
                kernel_initializer=keras.initializers.RandomNormal(stddev=2.0),
            ),
            keras.layers.Dense(
                4,
                activation="sigmoid",
                name="h3",
                kernel_initializer=keras.initializers.RandomNormal(stddev=3.0),
            ),
            keras.layers.Dense(2, name="head"),
        ],
        name="seq",
    )
    _kill_units(model.get_layer("h1"), DEAD)
    return model


def functional(seed: int = 0) -> keras.Model:
    """Two branches through one shared relu layer, then a tanh layer."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((FEATURES,))
    shared = keras.layers.Dense(8, activation="relu", name="shared")
    left = shared(inputs)
    right = shared(keras.layers.Lambda(lambda t: -t, name="negate")(inputs))
    merged = keras.layers.Concatenate(name="concat")([left, right])
    hidden = keras.layers.Dense(5, activation="tanh", name="h2")(merged)
    outputs = keras.layers.Dense(2, name="head")(hidden)
    return keras.Model(inputs, outputs, name="func")


class Block(keras.layers.Layer):
    """A nested layer holding its own Dense layers."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(7, activation="tanh", name="inner")
        self.gate = keras.layers.Dense(7, activation="sigmoid", name="gate")

    def call(self, x):
        return self.inner(x) * self.gate(x)


class Subclassed(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.h1 = keras.layers.Dense(8, activation="relu", name="h1")
        self.block = Block(name="block")
        self.head = keras.layers.Dense(2, name="head")

    def call(self, x, training=False):
        return self.head(self.block(self.h1(x)))


def subclassed(seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = Subclassed(name="sub")
    model(probe_data(2))  # build
    _kill_units(model.h1, DEAD)
    return model


def reference_activations(model: keras.Model, x: np.ndarray) -> dict[str, np.ndarray]:
    """Each hidden layer's output on `x`, by calling the layers one by one,
    under the layer's path (the prefix of its variables' paths)."""
    if isinstance(model, Subclassed):
        h1 = model.h1(x)
        return {
            "sub/h1": np.asarray(h1),
            "sub/block/inner": np.asarray(model.block.inner(h1)),
            "sub/block/gate": np.asarray(model.block.gate(h1)),
        }
    if model.name == "func":
        shared = model.get_layer("shared")
        left, right = shared(x), shared(-x)
        h2 = model.get_layer("h2")(np.concatenate([left, right], axis=1))
        return {
            "shared": np.concatenate([left, right], axis=0),
            "h2": np.asarray(h2),
        }
    out, y = {}, x
    for layer in model.layers[:-1]:
        y = layer(y)
        out[f"{model.name}/{layer.name}"] = np.asarray(y)
    return out


def reference_statistics(y: np.ndarray, activation: str) -> dict[str, float]:
    """The activation statistics of `y` in NumPy float64."""
    a = y.astype(np.float64)
    samples = a.reshape(-1, a.shape[-1])
    stats = {
        "mean": a.mean(),
        "std": a.std(),
        "min": a.min(),
        "max": a.max(),
        "zero_fraction": np.mean(a == 0),
        "nonfinite": 0.0,
        "dead_fraction": np.mean(np.all(samples == 0, axis=0)),
    }
    if activation == "tanh":
        stats["saturated_fraction"] = np.mean(np.abs(a) >= 0.99)
    elif activation == "sigmoid":
        stats["saturated_fraction"] = np.mean((a <= 0.01) | (a >= 0.99))
    return {k: float(v) for k, v in stats.items()}


#: Each builder and the activation of each layer it has watched by default,
#: by the layer's path: Sequential and subclassed models call their layers
#: in their own name scope, a functional model its layers at the top.
BUILDERS = {
    "sequential": (
        sequential,
        {"seq/h1": "relu", "seq/h2": "tanh", "seq/h3": "sigmoid"},
    ),
    "functional": (functional, {"shared": "relu", "h2": "tanh"}),
    "subclassed": (
        subclassed,
        {"sub/h1": "relu", "sub/block/inner": "tanh", "sub/block/gate": "sigmoid"},
    ),
}
#: The dead layer's path, by builder.
H1 = {"sequential": "seq/h1", "subclassed": "sub/h1"}


def assert_snapshot_matches(snapshot, model: keras.Model, x: np.ndarray) -> None:
    """`snapshot` (of `model` on `x`, with histograms) against the NumPy
    float64 references of each watched layer's output: every statistic
    within 2e-6 of the layer's scale, the histogram counts exactly."""
    buckets = snapshot.hist_counts.shape[1]
    reference = reference_activations(model, x)
    for i, (layer, activation) in enumerate(zip(snapshot.layers, snapshot.activations)):
        y = reference[layer]
        expected = reference_statistics(y, activation)
        tolerance = 2e-6 * max(1.0, abs(expected["max"]), abs(expected["min"]))
        for name in ACTIVATION_STATISTICS:
            values = snapshot.stat(name)
            if name not in expected:
                assert layer not in values, (layer, name)
                continue
            want = pytest.approx(expected[name], abs=tolerance)
            assert values[layer] == want, (layer, name)
        counts, low, high = reference_histogram(y, buckets)
        assert snapshot.hist_counts[i].tolist() == counts.tolist()
        assert snapshot.hist_range[i].tolist() == pytest.approx([low, high])
