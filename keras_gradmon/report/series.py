"""One scalar tag of a run in bounded memory: a deterministic decimation of
its points for the medians and the plots, beside exact aggregates over every
point for what the report states exactly.

The kept points are the first point (smallest step) of each bucket of
`width` steps, plus the last point and the highest finite one; `width` is
the smallest power of two that leaves at most `max_points` of them. So
the kept steps depend only on the series' points (not on the order of the
files or of the reading), and two tags written at the same steps keep the
same steps but for their highest points, which the report needs to combine
tags step by step (a layer's norm from its variables' norms). Tags given
one `Peaks` (the accumulator gives one to the tags that differ in their
last segment only: a layer's variables) keep each other's highest points
too, so that a layer's norm has its peak.

The aggregates are exact over every point, whatever the bound: the number
of points, the first and last step, the last value, the lowest and highest
finite value and the step of the highest, the number of non-finite values,
the points "flagged" (above 0 or NaN: a non-finite count) and the first
flagged step, and the steps each point covers since the one before
(`alerts.rules.steps_covered`) with the mean weighted by them.

A step written twice (a resumed run writes its steps again) reads as its
later value, as TensorBoard shows the later attempt, in the kept points and
in `last`. The other aggregates take the later value only where both come
in one batch (`BATCH` points of a tag read together); a value at a step
folded in an earlier batch (the values it replaces may be gone from the
kept points) leaves them as they were: they hold the first value of that
step, and `rewritten` counts such points (`Run.unread_notes` names them).
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


class Peaks(dict):
    """`{tag: step of its highest point}` of sibling series, each of which
    keeps the points at these steps beside its own (see `Series`).

    Example:

    >>> peaks = Peaks()
    >>> kernel, bias = Series(4, peaks, "k"), Series(4, peaks, "b")
    >>> peaks.offer("k", np.arange(100), np.where(np.arange(100) == 50, 9.0, 1.0))
    >>> kernel.extend(np.arange(100), np.where(np.arange(100) == 50, 9.0, 1.0))
    >>> bias.extend(np.arange(100), np.ones(100))
    >>> list(bias)
    [0, 50, 64, 99]
    """

    def offer(self, tag: str, steps: np.ndarray, values: np.ndarray) -> None:
        """Notes the highest finite point of a batch of `tag`'s points if
        it beats the tag's noted one: called before any sibling folds the
        batch's steps in (a point left out cannot come back)."""
        finite = np.isfinite(values)
        if not finite.any():
            return
        at = int(np.argmax(np.where(finite, values, -np.inf)))
        high = self.get(tag)
        if high is None or values[at] > high[1]:
            self[tag] = (int(steps[at]), float(values[at]))

    def steps(self) -> list[int]:
        """The steps to keep."""
        return [step for step, _ in self.values()]


def _aggregate(name: str) -> property:
    def get(self: Series) -> object:
        self._fold()
        return getattr(self._aggregates, name)

    return property(get, doc=f"`Aggregates.{name}` (every point folded in).")


class Series(Mapping[int, float]):
    """The points of one tag: `{step: value}` of the kept points (a
    `Mapping`), and the exact aggregates over all of them.

    Args:
        max_points: The most points kept (at least 3, and the siblings'
            highest beside them), or None: all.
        peaks: Shared with sibling series: the steps of their highest
            points are kept too (`Peaks`).
        name: This series' key in `peaks`.

    Example:

    >>> series = Series(max_points=4)
    >>> series.extend(np.arange(100), np.arange(100.0))
    >>> series.count, series.high, series.high_step, series.last
    (100, 99.0, 99, (99, 99.0))
    >>> dict(series)
    {0: 0.0, 64: 64.0, 99: 99.0}
    """

    def __init__(
        self,
        max_points: int | None = MAX_POINTS,
        peaks: Peaks | None = None,
        name: str = "",
    ) -> None:
        if max_points is not None and (
            not isinstance(max_points, int) or max_points < 3
        ):
            raise ValueError(
                "`max_points` must be an integer >= 3 or None. "
                f"Received: max_points={max_points!r}"
            )
        self.max_points = max_points
        self._peaks, self._name = peaks, name
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
        they replace the kept points at those steps, and `last` at its
        step; the other aggregates keep the first value of each (counted in
        `rewritten`)."""
        a = self._aggregates
        a.rewritten += int(steps.size)
        at = np.searchsorted(self._steps, steps)
        hit = at < self._steps.size
        hit[hit] = self._steps[at[hit]] == steps[hit]
        self._values[at[hit]] = values[hit]
        if a.last is not None and steps[-1] == a.last[0]:
            a.last = (a.last[0], float(values[-1]))
            if math.isfinite(values[-1]):
                a.last_finite = a.last

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
            if self._peaks is not None:
                at = slice(peak, peak + 1)
                self._peaks.offer(self._name, steps[at], values[at])
        low = float(values.min())
        a.low = low if math.isnan(a.low) else min(a.low, low)

    def _keep(self, steps: np.ndarray, values: np.ndarray) -> None:
        steps = np.concatenate([self._steps, steps])
        values = np.concatenate([self._values, values])
        if self.max_points is not None and steps.size > self.max_points:
            while _firsts(steps[:-1] // self.width).size > self.max_points - 2:
                self.width *= 2
            first = _firsts(steps[:-1] // self.width)
            pinned = self._pinned(steps)  # few: inserted where missing
            at = np.searchsorted(first, pinned)
            missing = first[np.minimum(at, first.size - 1)] != pinned
            missing |= at == first.size
            first = np.insert(first, at[missing], pinned[missing])
            first = np.append(first[first < steps.size - 1], steps.size - 1)
            steps, values = steps[first], values[first]
        self._steps, self._values = steps, values

    def _pinned(self, steps: np.ndarray) -> np.ndarray:
        """The indices in `steps` of the points kept whatever the width: the
        highest, and the siblings' highest (`Peaks`)."""
        high = self._aggregates.high_step
        wanted = [] if high is None else [high]
        if self._peaks is not None:
            wanted += self._peaks.steps()
        wanted = np.array(sorted(set(wanted)), np.int64)
        at = np.minimum(np.searchsorted(steps, wanted), steps.size - 1)
        return at[steps[at] == wanted]


def _firsts(buckets: np.ndarray) -> np.ndarray:
    """The index of the first of each run of equal (sorted) buckets."""
    return np.flatnonzero(np.diff(buckets, prepend=buckets[0] - 1))
