"""Checks of `keras_gradmon.core.noise_scale` shared by the TensorFlow
process (tests/signals) and the JAX one (tests/jax): each takes `compiled`,
which turns a function into its compiled form (`tf.function`, with or
without XLA, or `jax.jit`), and imports no framework itself."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from keras import ops

from keras_gradmon.core.noise_scale import TOTALS, NoiseScale, estimates
from tests.signals.linear_regression import LinearRegression
from tests.signals.reference import ReferenceNoiseScale, reference_estimates

Compile = Callable[[Callable], Callable]

RTOL = 1e-5

#: (|G_small|^2, |G_big|^2, k): both signs of each estimate, k = 1 (NaN),
#: k = 2, and scales near float32's tiny and large ends.
ESTIMATE_CASES = np.array(
    [
        (3.0, 1.5, 4),
        (2.0, 1.9, 2),
        (1.0, 2.0, 8),  # trace < 0
        (5.0, 1.0, 4),  # grad_sq < 0
        (7.0, 3.0, 1),  # one part: no estimate
        (3e-30, 1.5e-30, 16),
        (3e30, 1.5e30, 3),
    ],
    dtype="float32",
)

#: (d, s, r, k, b) of the regressions: B_simple from below k b to above it.
REGRESSIONS = [(4, 1.0, 1.0, 4, 8), (8, 0.5, 1.0, 2, 16), (16, 2.0, 1.0, 8, 4)]


def _scalar(value) -> np.ndarray:
    """A float32 0-d array: a tensor argument (a Python float would make
    `tf.function` trace again for each value)."""
    return np.asarray(value, dtype="float32")


def _numpy(values: dict) -> dict[str, np.ndarray]:
    return {key: np.float64(ops.convert_to_numpy(v)) for key, v in values.items()}


def _assert_totals(got: dict, want: dict, rtol: float = RTOL) -> None:
    assert sorted(got) == sorted(TOTALS), sorted(got)
    for key in TOTALS:
        np.testing.assert_allclose(got[key], want[key], rtol=rtol, err_msg=key)


def check_estimates(compiled: Compile) -> None:
    """`estimates`, elementwise on vectors, against the float64 reference."""
    small, big, parts = ESTIMATE_CASES.T
    grad_sq, trace = compiled(estimates)(small, big, parts.astype("int32"))
    want_grad_sq, want_trace = reference_estimates(small, big, parts)
    assert ops.convert_to_numpy(grad_sq).dtype == np.float32
    np.testing.assert_allclose(ops.convert_to_numpy(grad_sq), want_grad_sq, RTOL)
    np.testing.assert_allclose(ops.convert_to_numpy(trace), want_trace, RTOL)


def _steps(count: int, seed: int) -> list[tuple]:
    """Random steps: mostly k = 4, some k = 1 and non-finite (ignored)."""
    rng = np.random.default_rng(seed)
    steps = []
    for i in range(count):
        big = rng.uniform(0.5, 2.0)
        small = big + rng.uniform(-0.2, 3.0)
        parts = 1 if i % 7 == 3 else 4
        small = np.inf if i % 11 == 5 else small
        steps.append((small, big, parts))
    return steps


def check_update_and_totals(compiled: Compile, batch_size: int | None) -> None:
    """`update` step by step and `totals` after each step against the
    reference; NaN everywhere before the first estimate."""
    rule = NoiseScale(decay=0.9, batch_size=batch_size)
    reference = ReferenceNoiseScale(0.9, batch_size)
    update, totals = compiled(rule.update), compiled(rule.totals)
    state = rule.initial_state()
    assert sorted(state) == sorted(rule.state_spec())
    for small, big, parts in [(5.0, 5.0, 1), *_steps(40, seed=0)]:
        small, big = _scalar(small), _scalar(big)
        state = update(state, small, big, parts)
        reference.update(small, big, parts)
        got = _numpy(totals(state))
        _assert_totals(got, reference.totals())
        if not reference.grad_sq:  # the first step has k = 1: nothing yet
            assert all(np.isnan(v) for v in got.values()), got
    dtypes = [ops.convert_to_numpy(v).dtype for v in state.values()]
    assert all(dtype == np.float32 for dtype in dtypes), dtypes


def check_negative_estimates(compiled: Compile) -> None:
    """Single estimates of both signs: the smoothed ratio stays finite and
    positive; while a smoothed estimate is negative, the ratio is NaN."""
    rule = NoiseScale(decay=0.9, batch_size=4)
    update, totals = compiled(rule.update), compiled(rule.totals)
    state = update(rule.initial_state(), _scalar(5.0), _scalar(1.0), 4)
    first = _numpy(totals(state))
    assert first["grad_sq"] < 0 and np.isnan(first["batch_ratio"]), first
    assert np.isnan(first["b_simple"]), first
    negatives = 0
    for small, big in [(2.0, 1.0), (2.5, 1.0), (6.0, 1.2)] * 10:
        negatives += float(estimates(small, big, 4).grad_sq) < 0
        state = update(state, _scalar(small), _scalar(big), 4)
        got = _numpy(totals(state))
        assert got["grad_sq"] > 0, got
        assert np.isfinite(got["batch_ratio"]) and got["batch_ratio"] > 0, got
        assert np.isfinite(got["b_simple"]) and got["b_simple"] > 0, got
    assert negatives == 10


def regression_steps(case: tuple, steps: int, seed: int = 0):
    """`(problem, |G_small|^2, |G_big|^2)` of `steps` steps of k parts of b
    examples of the regression `case` = (d, s, r, k, b), float32."""
    dim, noise_std, distance, parts, size = case
    problem = LinearRegression(dim, noise_std, distance, seed=seed)
    x, y = problem.sample(np.random.default_rng(seed), (steps, parts, size))
    part_grads = problem.gradients(x, y).mean(axis=2)  # (steps, k, d)
    small = np.sum(part_grads**2, axis=-1).mean(axis=1)
    big = np.sum(part_grads.mean(axis=1) ** 2, axis=-1)
    return problem, small.astype("float32"), big.astype("float32")


def check_regression(compiled: Compile, case: tuple, steps: int = 2000) -> None:
    """The smoothed B_simple of the regression within 15% of its closed form."""
    problem, small, big = regression_steps(case, steps)
    parts, size = case[3], case[4]
    rule = NoiseScale(decay=0.998, batch_size=size)
    update = compiled(rule.update)
    state = rule.initial_state()
    for step in range(steps):
        state = update(state, _scalar(small[step]), _scalar(big[step]), parts)
    got = _numpy(compiled(rule.totals)(state))
    np.testing.assert_allclose(got["b_simple"], problem.b_simple, rtol=0.15)
    want_ratio = problem.b_simple / (parts * size)
    np.testing.assert_allclose(got["batch_ratio"], want_ratio, rtol=0.15)
    np.testing.assert_allclose(got["grad_sq"], problem.grad_sq, rtol=0.15)
    np.testing.assert_allclose(got["trace"], problem.trace, rtol=0.15)
