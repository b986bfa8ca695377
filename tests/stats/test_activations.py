import numpy as np
import pytest
import tensorflow as tf

from keras_gradmon.activations.probe import (
    dead_fraction,
    dead_units,
    saturated_fraction,
)
from tests.conftest import compile_fn


def _reference_dead(y: np.ndarray) -> np.ndarray:
    samples = y.reshape(-1, y.shape[-1])
    return np.all(samples == 0, axis=0)


@pytest.mark.parametrize("shape", [(32, 6), (4, 5, 5, 3), (2, 7, 4)])
def test_dead_units_match_numpy(mode, shape):
    rng = np.random.default_rng(len(shape))
    y = np.maximum(rng.normal(size=shape), 0).astype("float32")
    y[..., 1] = 0.0  # dead on every sample and position
    y[0, ..., 2] = 0.0  # zero on one sample only: alive
    fn = compile_fn(lambda t: (dead_units(t), dead_fraction(t)), mode)
    mask, fraction = fn(tf.constant(y))
    expected = _reference_dead(y)
    assert mask.numpy().tolist() == expected.tolist()
    assert float(fraction) == pytest.approx(expected.mean(), abs=1e-7)
    assert expected[1] and not expected[2]


def test_dead_units_of_an_empty_batch_are_none():
    mask = dead_units(tf.zeros([0, 4]))
    assert mask.numpy().tolist() == [False] * 4
    assert float(dead_fraction(tf.zeros([0, 4]))) == 0.0


@pytest.mark.parametrize("activation", ["tanh", "sigmoid"])
def test_saturated_fraction_matches_numpy(mode, activation):
    rng = np.random.default_rng(0)
    pre = rng.normal(scale=4.0, size=(64, 10))
    y64 = np.tanh(pre) if activation == "tanh" else 1 / (1 + np.exp(-pre))
    y = y64.astype("float32")
    if activation == "tanh":
        expected = np.mean(np.abs(y.astype(np.float64)) >= 0.99)
    else:
        y_64 = y.astype(np.float64)
        expected = np.mean((y_64 <= 0.01) | (y_64 >= 0.99))
    fn = compile_fn(lambda t: saturated_fraction(t, activation), mode)
    got = float(fn(tf.constant(y)))
    assert 0.1 < expected < 0.9  # the data exercises both sides
    assert got == pytest.approx(expected, abs=1e-6)


def test_saturated_fraction_rejects_other_activations():
    with pytest.raises(ValueError, match="Received: activation='relu'"):
        saturated_fraction(tf.ones([2]), "relu")
