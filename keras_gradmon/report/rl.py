"""The RL section of the report, per run and per group of seeds, with the
aggregates across seeds (median, IQM, a stratified bootstrap interval).

The RL section of the report: per run, and per group of seeds.

Pure NumPy over `Run`s. A run's RL numbers are its `rl/...` tags (written
by `keras_gradmon.rl.RLHealthMonitor`); the tags are parsed in one place,
`keras_gradmon.rl.tags.parse_rl_tag`.

Aggregates across seeds: median, interquartile mean, and a stratified
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

import dataclasses
import functools
import re
from collections.abc import Callable, Sequence

import numpy as np

from keras_gradmon.report.accumulator import Run
from keras_gradmon.report.alert_store import AlertCounts, counts_of
from keras_gradmon.report.timeline import Timeline
from keras_gradmon.rl.tags import RL, is_rl_alert_scope, parse_rl_tag

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


#: The run's final return: the mean return of the last N episodes at the
#: last summary; for groups, the last evaluation's mean return instead when
#: every member recorded evaluations (`RLHealthMonitor.record_evaluation`).
FINAL_RETURN = "episode/return_mean"
EVAL_RETURN = "eval/return_mean"
#: Bootstrap resamples and confidence of the groups' intervals.
BOOTSTRAP_REPS = 2000
CONFIDENCE = 0.95


@dataclasses.dataclass(frozen=True)
class RLReport:
    """The RL health of one monitored agent (one `rl/` scope) in one run."""

    run: str
    scope: str | None
    series: dict[str, tuple[np.ndarray, np.ndarray]]
    alerts: list[dict]
    alert_counts: AlertCounts | None = None

    @property
    def title(self) -> str:
        return f"{self.run} [{RL}/{self.scope}]" if self.scope else f"{self.run} [{RL}]"

    @property
    def name(self) -> str:
        """What `--group` matches: the run name, and `/<scope>` if scoped."""
        return f"{self.run}/{self.scope}" if self.scope else self.run

    def last(self, name: str) -> tuple[int, float] | None:
        """`(step, value)` of the last finite value of signal `name`."""
        steps, values = self.series.get(name, (np.zeros(0), np.zeros(0)))
        finite = np.isfinite(values)
        if not finite.any():
            return None
        index = int(np.nonzero(finite)[0][-1])
        return int(steps[index]), float(values[index])

    @property
    def final_return(self) -> float | None:
        """The mean return of the last collect episodes at the last summary."""
        return self.final(FINAL_RETURN)

    def final(self, name: str) -> float | None:
        last = self.last(name)
        return None if last is None else last[1]

    @property
    def counts(self) -> AlertCounts:
        """Exact numbers over every alert record (`alerts` holds those kept
        whole): `alert_counts`, else those of `alerts`."""
        return self.alert_counts or counts_of(self.alerts)

    def alert_count(self, tier: str) -> int:
        return self.counts.tiers.get(tier, 0)

    @functools.cached_property
    def timeline(self) -> Timeline:
        """The alerts grouped into incidents (`AlertCounts.timeline`)."""
        return self.counts.timeline()


def _scoped(run: Run) -> dict[str | None, dict[str, tuple[np.ndarray, np.ndarray]]]:
    found: dict[str | None, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for tag in run.scalars:
        parsed = parse_rl_tag(tag)
        if parsed is not None:
            scope, name = parsed
            found.setdefault(scope, {})[name] = run.series(tag)
    for alert in run.alerts:
        scope = alert.get("scope")
        if is_rl_alert_scope(scope):
            found.setdefault(scope[len(RL) + 1 :] or None, {})
    return found


def analyze_rl(runs: Sequence[Run]) -> list[RLReport]:
    """An `RLReport` per `rl/` scope per run (runs without one: none)."""
    reports = []
    for run in runs:
        for scope, series in sorted(
            _scoped(run).items(), key=lambda item: (item[0] is not None, item[0] or "")
        ):
            alert_scope = f"{RL}/{scope}" if scope else RL
            alerts = [a for a in run.alerts if a.get("scope") == alert_scope]
            counts = run.alert_store.counts(alert_scope)
            reports.append(RLReport(run.name, scope, series, alerts, counts))
    return reports


@dataclasses.dataclass(frozen=True)
class GroupSummary:
    """The final return across the seeds of one configuration.

    Attributes:
        key: The group's name (from `--group`).
        source: The signal of the final return: `EVAL_RETURN` when every
            member recorded evaluations, else `FINAL_RETURN`.
        runs: The members with a final return, and `finals` theirs.
        median, iqm: Across seeds; `median_ci`, `iqm_ci` their 95%
            stratified-bootstrap intervals.
        low, high: The lowest and highest final return.
        curve: `(steps, median, iqm, low, high)` of the mean-return curves
            across seeds, on the steps all members share (interpolated).
        missing: Members without any episode statistics.
    """

    key: str
    source: str
    runs: list[str]
    finals: np.ndarray
    median: float
    iqm: float
    median_ci: tuple[float, float]
    iqm_ci: tuple[float, float]
    low: float
    high: float
    curve: tuple[np.ndarray, ...]
    missing: list[str]


def group_key(match: re.Match) -> tuple[str, str]:
    """`(group key, stratum)`: the capture groups (the named group `task`
    aside) joined by "/", or the whole match; the `task` group or ""."""
    named = match.groupdict()
    task = named.get("task") or ""
    skip = match.re.groupindex.get("task")
    parts = [
        g for i, g in enumerate(match.groups(), start=1) if i != skip and g is not None
    ]
    return ("/".join(parts) if parts else match.group(0)), task


def _curve(members: list[RLReport], source: str) -> tuple[np.ndarray, ...]:
    series = [m.series[source] for m in members]
    series = [(s, v) for s, v in series if s.size]
    start = max(s[0] for s, _ in series)
    end = min(s[-1] for s, _ in series)
    steps = np.unique(np.concatenate([s[(s >= start) & (s <= end)] for s, _ in series]))
    grid = np.array([np.interp(steps, s, v) for s, v in series])
    return steps, median(grid, axis=0), iqm(grid, axis=0), grid.min(0), grid.max(0)


def _summary(key: str, members: list[tuple[RLReport, str]]) -> GroupSummary:
    ok = [(r, task) for r, task in members if r.final_return is not None]
    every_eval = all(r.final(EVAL_RETURN) is not None for r, _ in ok)
    source = EVAL_RETURN if every_eval else FINAL_RETURN
    finals = np.array([r.final(source) for r, _ in ok], dtype=np.float64)
    strata = [
        np.array([r.final(source) for r, t in ok if t == task], dtype=np.float64)
        for task in sorted({t for _, t in ok})
    ]
    ci = {
        name: stratified_bootstrap_ci(strata, fn, BOOTSTRAP_REPS, CONFIDENCE)
        for name, fn in (("median", median), ("iqm", iqm))
    }
    return GroupSummary(
        key=key,
        source=source,
        runs=[r.title for r, _ in ok],
        finals=finals,
        median=float(median(finals)),
        iqm=float(iqm(finals)),
        median_ci=ci["median"],
        iqm_ci=ci["iqm"],
        low=float(finals.min()),
        high=float(finals.max()),
        curve=_curve([r for r, _ in ok], source),
        missing=[r.title for r, _ in members if r.final_return is None],
    )


def group_reports(reports: Sequence[RLReport], pattern: str) -> list[GroupSummary]:
    """Groups the RL reports whose name matches `pattern` (`re.search`).

    The group key is the pattern's capture groups joined by "/" (or the
    matched text when it has none): `--group '(.*)_seed\\d+'` puts
    `dqn_seed0` and `dqn_seed1` in group `dqn`. A named group `task` is
    left out of the key and makes the bootstrap stratified by task.
    Groups whose members have no episode statistics at all are left out.
    """
    compiled = re.compile(pattern)
    groups: dict[str, list[tuple[RLReport, str]]] = {}
    for report in reports:
        match = compiled.search(report.name)
        if match is not None:
            key, task = group_key(match)
            groups.setdefault(key, []).append((report, task))
    return [
        _summary(key, members)
        for key, members in sorted(groups.items())
        if any(r.final_return is not None for r, _ in members)
    ]
