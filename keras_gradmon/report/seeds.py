"""Aggregates across seeds: median, interquartile mean, and a stratified
bootstrap confidence interval, as rliable (Agarwal et al., 2021) reports
them. Pure NumPy.

The interquartile mean (IQM) is the mean of the middle half of the scores:
with n scores sorted, `floor(n / 4)` are cut from each end (the convention
of `scipy.stats.trim_mean(scores, 0.25)`, which rliable uses), so with
fewer than 4 seeds it is the plain mean.

The stratified bootstrap resamples the runs of each stratum (a task, or the
whole group) with replacement, independently, recomputes the statistic on
the pooled resample, and takes the percentile interval of `reps` resamples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Statistic = Callable[[np.ndarray], np.ndarray]  # [reps, n] -> [reps]


def iqm(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """The interquartile mean along `axis`.

    Example:

    >>> float(iqm(np.array([1.0, 2.0, 3.0, 4.0, 100.0, -50.0, 5.0, 6.0])))
    3.5
    """
    ordered = np.sort(np.asarray(scores, dtype=np.float64), axis=axis)
    n = ordered.shape[axis]
    cut = n // 4
    return np.take(ordered, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def median(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """The median along `axis`."""
    return np.median(np.asarray(scores, dtype=np.float64), axis=axis)


def stratified_bootstrap_ci(
    strata: Sequence[np.ndarray],
    statistic: Statistic = iqm,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap interval of `statistic` over pooled strata.

    Each resample draws, for every stratum in order, as many runs as it has
    with replacement (`rng.integers(0, n_s, (reps, n_s))`, one draw per
    stratum), pools them and applies `statistic` along the last axis.

    Args:
        strata: One array of scores per stratum (e.g. per task).
        statistic: `[reps, n] -> [reps]`, e.g. `iqm` or `median`.
        reps: Bootstrap resamples.
        confidence: The interval's coverage, in (0, 1).
        seed: Seed of `numpy.random.default_rng`.

    Returns:
        `(low, high)`.

    Example:

    >>> low, high = stratified_bootstrap_ci([np.array([1.0, 2.0, 3.0, 4.0])])
    >>> 1.0 <= low <= 2.5 <= high <= 4.0
    True
    """
    strata = [np.asarray(s, dtype=np.float64).ravel() for s in strata]
    if not strata or any(s.size == 0 for s in strata):
        raise ValueError(
            f"`strata` must hold at least one non-empty array of scores. "
            f"Received: strata={strata!r}"
        )
    if not 0 < confidence < 1:
        raise ValueError(
            f"`confidence` must be in (0, 1). Received: confidence={confidence!r}"
        )
    rng = np.random.default_rng(seed)
    pooled = np.concatenate(
        [s[rng.integers(0, s.size, size=(reps, s.size))] for s in strata], axis=1
    )
    values = statistic(pooled)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)
