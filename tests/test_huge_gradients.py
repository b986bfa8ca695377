"""Finite gradients of any size train to finite weights: the pre-clip norm is
computed overflow-safe, huge gradients are clipped (not turned into NaN),
and only real NaN/Inf steps are skipped."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_gradmon import GradientMonitorOptimizer
from tests.conftest import compile_fn

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow

SHAPES = ((4,), (3, 2), (5,))
METHODS = {
    "global_norm": {"method": "global_norm", "max_norm": 1.0},
    "autoclip": {"method": "autoclip", "percentile": 10.0, "history": 8},
    "zclip": {"method": "zclip", "warmup": 2},
    "agc": {"method": "agc", "clipping": 0.01},
}


def _gradients(rng: np.random.Generator, huge: int, scale: float) -> list:
    """Ordinary gradients, but variable `huge`'s are of size `scale` (finite:
    |u| <= 1, so u * 3e38 stays below float32's largest value)."""
    grads = [rng.uniform(-1, 1, shape).astype("float32") for shape in SHAPES]
    grads[huge] = (rng.uniform(-1, 1, SHAPES[huge]) * scale).astype("float32")
    assert all(np.isfinite(g).all() for g in grads)
    return [tf.constant(g) for g in grads]


def _train(
    method: str, skip: bool, grads_per_step: list, mode: str = "eager"
) -> tuple[list, list]:
    """The variables, and the snapshot after each step, of a run of
    `grads_per_step` in `mode` (one trace for every step)."""
    variables = [keras.Variable(np.ones(s, "float32")) for s in SHAPES]
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1),
        every_n_steps=1,
        clipping=METHODS[method],
        skip_nonfinite=skip,
    )
    step = compile_fn(lambda *g: optimizer.apply(list(g), variables), mode)
    snapshots = []
    for grads in grads_per_step:
        step(*grads)
        snapshots.append(optimizer.snapshot())
    return variables, snapshots


@settings(max_examples=25, deadline=None)
@given(
    huge=st.integers(0, len(SHAPES) - 1),
    exponent=st.floats(-30.0, np.log10(3e38)),
    method=st.sampled_from(sorted(METHODS)),
    skip=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_finite_gradients_of_any_size_give_finite_weights(
    huge, exponent, method, skip, seed
):
    rng = np.random.default_rng(seed)
    scale = float(np.float32(10.0**exponent))
    steps = [_gradients(rng, huge, scale) for _ in range(3)]
    variables, snapshots = _train(method, skip, steps)
    for v in variables:
        assert np.isfinite(v.numpy()).all(), (method, skip, scale)
    totals = snapshots[-1].totals
    assert np.isfinite(totals["clip_post_norm"])
    if skip:
        assert totals["skipped_steps"] == 0  # nothing real to skip
    if method == "global_norm" and totals["clip_pre_norm"] > 1.0:
        assert totals["clip_post_norm"] == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_under_xla(method):
    # Both scales through one compile: two steps beyond float32's norm
    # (from the fresh state), then two whose squares overflow but whose
    # norms fit.
    rng = np.random.default_rng(0)
    scales = (3e38, 3e38, 1e30, 1e30)
    steps = [_gradients(rng, 1, scale) for scale in scales]
    variables, snapshots = _train(method, True, steps, "xla")
    assert all(np.isfinite(v.numpy()).all() for v in variables)
    assert snapshots[-1].totals["skipped_steps"] == 0
    # Per-variable norms are right wherever they fit in float32.
    for i in (1, 3):  # the last step of each scale
        norms = snapshots[i].grad_stat("norm")
        for (path, value), g in zip(norms.items(), steps[i]):
            exact = float(np.sqrt(np.sum(np.float64(g.numpy()) ** 2)))
            if exact < np.finfo(np.float32).max:
                assert value == pytest.approx(exact, rel=1e-5), path
            else:
                assert value == np.inf, path
    assert np.isinf(list(snapshots[1].grad_stat("norm").values())[1])
    assert np.isfinite(list(snapshots[3].grad_stat("norm").values())[1])


def test_huge_gradients_are_clipped_to_max_norm_not_zeroed():
    rng = np.random.default_rng(3)
    grads = _gradients(rng, 0, 1e30)
    variables, [snapshot] = _train("global_norm", False, [grads])
    applied = [1.0 - v.numpy() for v in variables]  # SGD(0.1): 0.1 * clipped
    norm = np.sqrt(sum(np.sum(np.float64(a) ** 2) for a in applied)) / 0.1
    assert norm == pytest.approx(1.0, rel=1e-5)
    exact = np.sqrt(sum(np.sum(np.float64(g.numpy()) ** 2) for g in grads))
    assert snapshot.totals["clip_pre_norm"] == pytest.approx(exact, rel=1e-5)


def test_a_real_nan_is_still_skipped():
    rng = np.random.default_rng(4)
    grads = _gradients(rng, 2, 1e30)
    grads[0] = tf.constant([np.nan, 1.0, 2.0, 3.0])
    variables, [snapshot] = _train("global_norm", True, [grads])
    assert snapshot.totals["skipped_steps"] == 1
    for v in variables:
        np.testing.assert_array_equal(v.numpy(), np.ones(v.shape, "float32"))
