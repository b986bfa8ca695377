"""IQM, median and the stratified bootstrap interval against NumPy
references written independently (sorting, loops), with the same seeds."""

from __future__ import annotations

import numpy as np
import pytest

from keras_gradmon.report.rl import iqm, median, stratified_bootstrap_ci


def _iqm_reference(scores) -> float:
    """Sort, drop floor(n/4) at each end, average (scipy's trim_mean 0.25)."""
    ordered = sorted(float(s) for s in scores)
    cut = len(ordered) // 4
    kept = ordered[cut : len(ordered) - cut]
    return sum(kept) / len(kept)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 10, 13])
def test_iqm_is_the_mean_of_the_middle_half(n):
    scores = np.random.default_rng(n).normal(100, 30, size=n)
    assert iqm(scores) == pytest.approx(_iqm_reference(scores), rel=1e-12)


def test_iqm_known_values():
    assert iqm(np.array([1.0, 2.0, 3.0])) == 2.0  # n < 4: the mean
    # n = 8: drop 2 at each end of [-50, 1, 2, 3, 4, 5, 6, 100] -> mean(2..5)
    assert iqm(np.array([1.0, 2, 3, 4, 100, -50, 5, 6])) == 3.5
    rows = np.array([[1.0, 2, 3, 4], [10, 40, 20, 30]])
    np.testing.assert_array_equal(iqm(rows, axis=1), [2.5, 25.0])


def _ci_reference(strata, statistic, reps, confidence, seed):
    """One resample at a time, with the draws laid out as documented."""
    rng = np.random.default_rng(seed)
    draws = [rng.integers(0, len(s), size=(reps, len(s))) for s in strata]
    values = []
    for r in range(reps):
        pooled = [float(s[i]) for s, d in zip(strata, draws) for i in d[r]]
        values.append(statistic(pooled))
    values = np.sort(values)
    tail = (1 - confidence) / 2
    # np.percentile's default (linear) interpolation, written out
    def percentile(q):
        position = q * (reps - 1)
        low = int(np.floor(position))
        high = min(low + 1, reps - 1)
        return values[low] + (values[high] - values[low]) * (position - low)

    return percentile(tail), percentile(1 - tail)


@pytest.mark.parametrize("seed", [0, 7])
def test_stratified_bootstrap_matches_a_loop_reference(seed):
    rng = np.random.default_rng(100 + seed)
    strata = [rng.normal(200, 20, 5), rng.normal(50, 5, 3), rng.normal(0, 1, 4)]
    for statistic, reference in ((iqm, _iqm_reference), (median, np.median)):
        got = stratified_bootstrap_ci(strata, statistic, reps=300, seed=seed)
        want = _ci_reference(strata, reference, 300, 0.95, seed)
        assert got == pytest.approx(want, rel=1e-12)


def test_bootstrap_interval_of_the_mean_is_the_normal_interval_for_many_runs():
    scores = np.random.default_rng(3).normal(10.0, 2.0, 400)
    low, high = stratified_bootstrap_ci(
        [scores], lambda x: x.mean(axis=-1), reps=4000, seed=1
    )
    half = 1.959964 * scores.std() / np.sqrt(scores.size)
    assert low == pytest.approx(scores.mean() - half, abs=0.05 * half)
    assert high == pytest.approx(scores.mean() + half, abs=0.05 * half)


def test_bootstrap_edge_cases_and_bad_input():
    assert stratified_bootstrap_ci([np.array([5.0, 5.0, 5.0])]) == (5.0, 5.0)
    assert stratified_bootstrap_ci([np.array([4.0])], median) == (4.0, 4.0)
    with pytest.raises(ValueError, match=r"`strata` must hold .* Received: strata="):
        stratified_bootstrap_ci([np.array([])])
    with pytest.raises(ValueError, match=r"Received: confidence=1.5"):
        stratified_bootstrap_ci([np.array([1.0, 2.0])], confidence=1.5)
