"""One scalar tag of a run in bounded memory: a deterministic decimation of
its points for the medians and the plots, beside exact aggregates over every
point for what the report states exactly.

The kept points are the first point (smallest step) of each bucket of
`width` steps, plus the last point and the highest finite one; `width` is
the smallest power of two that leaves at most `max_points` of them. So
the kept steps depend only on the series' points (not on the order of the
files or of the reading), and two tags written at the same steps keep the
same steps but for their highest points, which the report needs to combine
tags step by step (a layer's norm from its variables' norms).

The aggregates are exact over every point, whatever the bound: the number
of points, the first and last step, the last value, the lowest and highest
finite value and the step of the highest, the number of non-finite values,
the points "flagged" (above 0 or NaN: a non-finite count) and the first
flagged step, and the steps each point covers since the one before
(`alerts.rules.steps_covered`) with the mean weighted by them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping

import numpy as np

#: Points kept per series by default (beyond them a series is decimated).
MAX_POINTS = 2048
#: Points gathered before they are folded into the store at once (and table
#: rows before they are expanded).
BATCH = 1024


@dataclasses.dataclass
class Aggregates:
    """Exact numbers over every point of a series (see `Series`)."""

    count: int = 0  # points (a step written again counts once)
    finite: int = 0  # finite values
    nonfinite: int = 0  # NaN and infinite values
    flagged: int = 0  # values above 0 or NaN (a non-finite count)
    rewritten: int = 0  # points at steps already read (a resumed run)
    first_step: int | None = None
    last: tuple[int, float] | None = None  # (step, value) of the last point
    last_finite: tuple[int, float] | None = None
    low: float = math.nan  # lowest finite value
    high: float = math.nan  # highest finite value
    high_step: int | None = None  # its (first) step
    first_flagged: int | None = None
    covered: int = 0  # steps covered (`alerts.rules.steps_covered`), summed
    weighted: float = 0.0  # finite values times the steps they cover, summed
    weight: float = 0.0  # the steps the finite values cover


def _aggregate(name: str) -> property:
    def get(self: Series) -> object:
        self._fold()
        return getattr(self._aggregates, name)

    return property(get, doc=f"`Aggregates.{name}` (every point folded in).")


class Series(Mapping[int, float]):
    """The points of one tag: `{step: value}` of the kept points (a
    `Mapping`), and the exact aggregates over all of them.

    Args:
        max_points: The most points kept (at least 3), or None: all.

    Example:

    >>> series = Series(max_points=4)
    >>> series.extend(np.arange(100), np.arange(100.0))
    >>> series.count, series.high, series.high_step, series.last
    (100, 99.0, 99, (99, 99.0))
    >>> dict(series)
    {0: 0.0, 64: 64.0, 99: 99.0}
    """

    def __init__(self, max_points: int | None = MAX_POINTS) -> None:
        if max_points is not None and (
            not isinstance(max_points, int) or max_points < 3
        ):
            raise ValueError(
                "`max_points` must be an integer >= 3 or None. "
                f"Received: max_points={max_points!r}"
            )
        self.max_points = max_points
        self._pending: tuple[list[int], list[float]] = ([], [])
        self._steps = np.zeros(0, np.int64)
        self._values = np.zeros(0, np.float64)
        self.width = 1
        self._aggregates = Aggregates()

    count = _aggregate("count")
    finite = _aggregate("finite")
    nonfinite = _aggregate("nonfinite")
    flagged = _aggregate("flagged")
    rewritten = _aggregate("rewritten")
    first_step = _aggregate("first_step")
    last = _aggregate("last")
    last_finite = _aggregate("last_finite")
    low = _aggregate("low")
    high = _aggregate("high")
    high_step = _aggregate("high_step")
    first_flagged = _aggregate("first_flagged")
    covered = _aggregate("covered")

    def add(self, step: int, value: float) -> None:
        """Adds one point (a step written again replaces the kept point)."""
        self._pending[0].append(step)
        self._pending[1].append(value)
        if len(self._pending[0]) >= BATCH:
            self._fold()

    def extend(self, steps: np.ndarray, values: np.ndarray) -> None:
        """Adds points given as arrays."""
        self._fold()
        self._fold_arrays(np.asarray(steps, np.int64), np.asarray(values, np.float64))

    def kept(self) -> tuple[np.ndarray, np.ndarray]:
        """`(steps, values)` of the kept points, sorted by step."""
        self._fold()
        return self._steps, self._values

    @property
    def decimated(self) -> bool:
        """Whether points were left out of the kept ones."""
        return self.kept()[0].size < self.count

    @property
    def covered_mean(self) -> float | None:
        """The mean of the finite values, each weighted by the steps it
        covers (`alerts.rules.steps_covered`); None without a finite one."""
        found = self.aggregates
        return found.weighted / found.weight if found.weight > 0 else None

    @property
    def aggregates(self) -> Aggregates:
        """The exact numbers over every point."""
        self._fold()
        return self._aggregates

    def __getitem__(self, step: int) -> float:
        steps, values = self.kept()
        i = int(np.searchsorted(steps, step))
        if i < steps.size and steps[i] == step:
            return float(values[i])
        raise KeyError(step)

    def __iter__(self) -> Iterator[int]:
        return iter(self.kept()[0].tolist())

    def __len__(self) -> int:
        return int(self.kept()[0].size)

    def __repr__(self) -> str:
        return f"Series(count={self.count}, kept={len(self)}, last={self.last})"

    def _fold(self) -> None:
        steps, values = self._pending
        if steps:
            self._pending = ([], [])
            self._fold_arrays(np.array(steps, np.int64), np.array(values, np.float64))

    def _fold_arrays(self, steps: np.ndarray, values: np.ndarray) -> None:
        if not steps.size:
            return
        order = np.argsort(steps, kind="stable")
        steps, values = steps[order], values[order]
        last = np.append(steps[1:] != steps[:-1], True)  # a step's last value
        steps, values = steps[last], values[last]
        last = self._aggregates.last
        old = steps <= (last[0] if last else -math.inf)
        if old.any():
            self._rewrite(steps[old], values[old])
            steps, values = steps[~old], values[~old]
        if steps.size:
            self._aggregate(steps, values)
            self._keep(steps, values)

    def _rewrite(self, steps: np.ndarray, values: np.ndarray) -> None:
        """Points at steps already read (a resumed run writing them again):
        they replace the kept points at those steps; the aggregates keep the
        first value of each (counted in `rewritten`)."""
        self._aggregates.rewritten += int(steps.size)
        at = np.searchsorted(self._steps, steps)
        hit = at < self._steps.size
        hit[hit] = self._steps[at[hit]] == steps[hit]
        self._values[at[hit]] = values[hit]

    def _aggregate(self, steps: np.ndarray, values: np.ndarray) -> None:
        a = self._aggregates
        previous = a.last[0] if a.last else -1
        covered = np.maximum(np.diff(steps, prepend=previous), 1)
        finite = np.isfinite(values)
        flagged = np.nan_to_num(values, nan=1.0) > 0
        if a.first_step is None:
            a.first_step = int(steps[0])
        a.count += int(steps.size)
        a.last = (int(steps[-1]), float(values[-1]))
        a.covered += int(covered.sum())
        a.nonfinite += int(steps.size - finite.sum())
        if flagged.any():
            if a.first_flagged is None:
                a.first_flagged = int(steps[np.argmax(flagged)])
            a.flagged += int(flagged.sum())
        if finite.any():
            self._finite(steps[finite], values[finite], covered[finite])

    def _finite(
        self, steps: np.ndarray, values: np.ndarray, covered: np.ndarray
    ) -> None:
        a = self._aggregates
        a.finite += int(steps.size)
        a.last_finite = (int(steps[-1]), float(values[-1]))
        a.weighted += float(np.dot(values, covered))
        a.weight += float(covered.sum())
        peak = int(np.argmax(values))
        if a.high_step is None or values[peak] > a.high:
            a.high, a.high_step = float(values[peak]), int(steps[peak])
        low = float(values.min())
        a.low = low if math.isnan(a.low) else min(a.low, low)

    def _keep(self, steps: np.ndarray, values: np.ndarray) -> None:
        steps = np.concatenate([self._steps, steps])
        values = np.concatenate([self._values, values])
        if self.max_points is not None and steps.size > self.max_points:
            while _firsts(steps[:-1] // self.width).size > self.max_points - 2:
                self.width *= 2
            first = _firsts(steps[:-1] // self.width)
            high = np.searchsorted(steps, self._aggregates.high_step or 0)
            if high < steps.size and steps[high] == self._aggregates.high_step:
                at = np.searchsorted(first, high)  # the highest point stays
                if at == first.size or first[at] != high:
                    first = np.insert(first, at, high)
            first = np.append(first[first < steps.size - 1], steps.size - 1)
            steps, values = steps[first], values[first]
        self._steps, self._values = steps, values


def _firsts(buckets: np.ndarray) -> np.ndarray:
    """The index of the first of each run of equal (sorted) buckets."""
    return np.flatnonzero(np.diff(buckets, prepend=buckets[0] - 1))
