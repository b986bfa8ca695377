"""The gradient noise scale estimator on the TensorFlow backend: eagerly,
in `tf.function` and under XLA, against the NumPy float64 reference and on a
linear regression whose B_simple is known in closed form. The same checks
run under `jax.jit` in tests/jax/test_noise_scale.py."""

from __future__ import annotations

import numpy as np
import pytest

from keras_gradmon.core.noise_scale import NoiseScale, from_option
from tests.conftest import compile_fn
from tests.signals import noise_checks
from tests.signals.linear_regression import LinearRegression, empirical_b_simple


def test_estimates_match_reference(mode):
    noise_checks.check_estimates(lambda fn: compile_fn(fn, mode))


@pytest.mark.parametrize("batch_size", [None, 8])
def test_update_and_totals_match_reference(mode, batch_size):
    noise_checks.check_update_and_totals(lambda fn: compile_fn(fn, mode), batch_size)


def test_smoothed_ratio_positive_when_single_estimates_are_negative():
    noise_checks.check_negative_estimates(lambda fn: compile_fn(fn, "xla"))


@pytest.mark.parametrize("case", noise_checks.REGRESSIONS)
def test_regression_b_simple_within_15_percent(case):
    noise_checks.check_regression(lambda fn: compile_fn(fn, "xla"), case)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (True, NoiseScale(decay=0.99, batch_size=None)),
        (False, None),
        (None, None),
        ({}, NoiseScale()),
        ({"decay": 0.9}, NoiseScale(decay=0.9)),
        ({"batch_size": 32, "decay": 0.5}, NoiseScale(decay=0.5, batch_size=32)),
    ],
)
def test_from_option(value, want):
    assert from_option(value) == want


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"decay": 1.5},
            "`noise_scale['decay']` must be a number strictly between 0 and 1. "
            "Received: noise_scale['decay']=1.5",
        ),
        ({"decay": 0}, "Received: noise_scale['decay']=0"),
        ({"decay": True}, "Received: noise_scale['decay']=True"),
        (
            {"batch_size": 0},
            "`noise_scale['batch_size']` must be a positive integer. "
            "Received: noise_scale['batch_size']=0",
        ),
        ({"batch_size": 8.0}, "Received: noise_scale['batch_size']=8.0"),
        (
            {"decy": 0.9},
            "Unknown `noise_scale` option(s) ['decy']. Valid options: "
            "['batch_size', 'decay']. Received: noise_scale={'decy': 0.9}",
        ),
        (
            "on",
            "`noise_scale` must be True, False, None or a mapping of "
            "['batch_size', 'decay']. Received: noise_scale='on'",
        ),
    ],
)
def test_from_option_refuses_bad_values(value, message):
    with pytest.raises(ValueError) as error:
        from_option(value)
    assert message in str(error.value)


def test_constructor_names_its_arguments():
    with pytest.raises(ValueError, match=r"^`decay` must be .* Received: decay=1$"):
        NoiseScale(decay=1)
    with pytest.raises(ValueError, match=r"Received: batch_size=-2$"):
        NoiseScale(batch_size=-2)


def test_state_spec_is_float32_scalars_at_zero():
    spec = NoiseScale().state_spec()
    assert spec == {
        name: ((), "float32", 0.0) for name in ("grad_sq", "trace", "weight", "parts")
    }


@pytest.mark.parametrize("dim", [4, 16])
def test_regression_helper_data_and_model(dim):
    # The helper's data set has the closed-form B_simple (up to sampling
    # noise), and its model computes x . w with the fixed w.
    problem = LinearRegression(dim, noise_std=2.0, distance=1.0, seed=3)
    x, y = problem.dataset(65536, seed=1)
    empirical = empirical_b_simple(problem, x, y)
    np.testing.assert_allclose(empirical, problem.b_simple, rtol=0.05)
    predictions = np.asarray(problem.model().predict(x[:64], verbose=0))[:, 0]
    want = x[:64] @ problem.weights
    np.testing.assert_allclose(predictions, want, rtol=1e-4, atol=1e-5)
