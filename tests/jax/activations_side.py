"""The activation probe's model for tests/jax/test_activations.py, and the
TensorFlow side of its parity test, run in a process of its own:
`KERAS_BACKEND=tensorflow python -m tests.jax.activations_side IN.npz
OUT.npz` measures the model with the weights in IN on IN's probe batch and
saves the snapshot."""

from __future__ import annotations

import sys

import numpy as np

#: Channels of the "relu" layer given a large negative BatchNorm offset:
#: zero on every input, in inference and in training.
DEAD = [2, 5]
BUCKETS = 10


def probe_net():
    """Conv -> BatchNorm -> ReLU -> tanh conv -> pool -> sigmoid -> head."""
    import keras

    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            layers.Conv2D(8, 3, padding="same", name="conv"),
            layers.BatchNormalization(name="bn"),
            layers.ReLU(name="relu"),
            layers.Conv2D(6, 3, padding="same", activation="tanh", name="squash"),
            layers.GlobalAveragePooling2D(name="pool"),
            layers.Dense(8, activation="sigmoid", name="gate"),
            layers.Dense(3, name="head"),
        ],
        name="probe_net",
    )


#: The scale of each layer's weights, in `get_weights` order (kernel, bias;
#: BatchNorm's gamma, beta, moving mean, moving variance): enough that some
#: tanh and sigmoid outputs saturate and others do not.
_SCALES = {
    "conv": (0.5, 0.1),
    "squash": (0.25, 0.1),
    "gate": (6.0, 0.5),
    "head": (0.3, 0.1),
}


def weights(model, seed: int = 0) -> list[np.ndarray]:
    """Random float32 weights for `probe_net()`, moving statistics and the
    DEAD channels included."""
    rng = np.random.default_rng(seed)
    values = []
    for layer in model.layers:
        if layer.name == "bn":
            gamma = rng.uniform(0.5, 1.5, 8)
            beta = rng.normal(0.0, 0.3, 8)
            beta[DEAD] = -50.0
            values += [gamma, beta, rng.normal(0.0, 0.2, 8), rng.uniform(0.5, 2.0, 8)]
        elif layer.weights:
            kernel, bias = _SCALES[layer.name]
            values += [
                rng.normal(0.0, scale, v.shape)
                for scale, v in zip((kernel, bias), layer.weights)
            ]
    return [v.astype("float32") for v in values]


def probe_batch(count: int = 32, seed: int = 1) -> np.ndarray:
    """`count` probe images."""
    return np.random.default_rng(seed).normal(size=(count, 8, 8, 3)).astype("float32")


def measure(model, probe: np.ndarray) -> dict[str, np.ndarray]:
    """One `ActivationMonitor` snapshot of `model` on `probe`, as arrays."""
    from keras_gradmon import ActivationMonitor

    snapshot = ActivationMonitor(model, probe, histogram_buckets=BUCKETS).record(0)
    out = {
        "stats": snapshot.stats,
        "reached": snapshot.reached,
        "counts": snapshot.hist_counts,
        "ranges": snapshot.hist_range,
        "layers": np.array(snapshot.layers),
    }
    for layer, units in snapshot.dead_units.items():
        out[f"dead/{layer}"] = units
    return out


def main(source: str, target: str) -> None:
    """Measures on this process's backend what the JAX side measured."""
    with np.load(source) as data:
        probe = data["probe"]
        values = [data[f"w{i}"] for i in range(len(data.files) - 1)]
    model = probe_net()
    model.set_weights(values)
    np.savez(target, **measure(model, probe))


if __name__ == "__main__":
    main(*sys.argv[1:3])
