"""The signals of issue 21 in one run: update/weight ratio, spikes between
summaries, skipped spikes, gradient noise scale, share of steps clipped.

Pure NumPy over a `Run`; a signal the run did not write is None (or, for
the update ratio, has no entry), and the report then says nothing of it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

import numpy as np

from keras_gradmon.alerts.clip_fraction import steps_covered
from keras_gradmon.alerts.update_ratio import HIGH, LOW
from keras_gradmon.report.events import Run
from keras_gradmon.report.findings import last, prefix
from keras_gradmon.report.rl import group_key
from keras_gradmon.tags import GLOBAL

if TYPE_CHECKING:
    from keras_gradmon.report.analysis import RunReport

#: `update_ratio` healthy band of the report: the update-ratio rule's default.
UPDATE_RATIO_BAND = (LOW, HIGH)
#: `noise_scale/batch_ratio` beyond these: the batch is far below (above)
#: B_simple.
FAR_BELOW, FAR_ABOVE = 10.0, 0.1


@dataclasses.dataclass(frozen=True)
class Spread:
    """One signal over a run's summaries (finite values only)."""

    median: float
    low: float
    high: float
    last: float
    summaries: int
    outside: int = 0  # summaries outside the healthy band, where there is one

    @classmethod
    def of(
        cls, values: np.ndarray, band: tuple[float, float] | None = None
    ) -> Spread | None:
        """The spread of `values`, None if none is finite.

        Example:

        >>> Spread.of(np.array([1e-3, np.nan, 2e-3, 1e-9]), (1e-7, 1e-1)).outside
        1
        """
        finite = values[np.isfinite(values)]
        if not finite.size:
            return None
        outside = 0
        if band is not None:
            outside = int(np.sum((finite < band[0]) | (finite > band[1])))
        return cls(
            median=float(np.median(finite)),
            low=float(finite.min()),
            high=float(finite.max()),
            last=float(finite[-1]),
            summaries=int(finite.size),
            outside=outside,
        )


@dataclasses.dataclass(frozen=True)
class Signals:
    """Issue 21's signals of one monitored optimizer in one run.

    Attributes:
        update_ratio: `{"global" or group: Spread}` of `update_ratio`.
        band: The healthy band the update ratios are checked against.
        spike: `(largest spikes/max_norm, its spikes/max_step)`, or None.
        skipped_spikes: The last `skipped/spikes` (steps skipped as spikes).
        batch_ratio: `noise_scale/batch_ratio` over the run.
        b_simple: `noise_scale/b_simple` over the run (examples).
        clip_fraction: Share of the steps clipped, each summary's
            `clip/fraction` weighted by the steps it covers.
    """

    update_ratio: dict[str, Spread]
    band: tuple[float, float] = UPDATE_RATIO_BAND
    spike: tuple[float, int] | None = None
    skipped_spikes: int | None = None
    batch_ratio: Spread | None = None
    b_simple: Spread | None = None
    clip_fraction: float | None = None


def clip_share(steps: np.ndarray, fractions: np.ndarray) -> float | None:
    """The share of steps clipped: each summary's fraction weighted by the
    steps it covers (`steps_covered`); None without a finite fraction.

    Example:

    >>> round(clip_share(np.array([0, 100, 200]), np.array([1.0, 0.0, 0.5])), 4)
    0.2537
    """
    weights = np.array(
        [
            steps_covered(int(step), int(steps[i - 1]) if i else None)
            for i, step in enumerate(steps)
        ],
        dtype=np.float64,
    )
    finite = np.isfinite(fractions)
    if not finite.any():
        return None
    return float(np.average(fractions[finite], weights=weights[finite]))


def _largest_spike(run: Run, scope: str | None) -> tuple[float, int] | None:
    steps, norms = run.series(prefix("spikes", scope) + "max_norm")
    finite = np.isfinite(norms)
    if not finite.any():
        return None
    i = int(np.argmax(np.where(finite, norms, -np.inf)))
    at = run.scalars.get(prefix("spikes", scope) + "max_step", {}).get(int(steps[i]))
    return float(norms[i]), int(steps[i] if at is None else at)


def run_signals(
    run: Run,
    scope: str | None,
    groups: list[str],
    band: tuple[float, float] = UPDATE_RATIO_BAND,
) -> Signals:
    """The signals of the optimizer with tag scope `scope` in `run`, the
    update ratio of "global" and of each of `groups`.

    Example:

    >>> run = Run("r", {"skipped/spikes": {100: 0.0, 200: 2.0}}, [], [])
    >>> run_signals(run, None, []).skipped_spikes
    2
    """
    ratios = {}
    for subject in [GLOBAL, *groups]:
        spread = Spread.of(run.series(prefix("update_ratio", scope) + subject)[1], band)
        if spread is not None:
            ratios[subject] = spread
    skipped = last(run, prefix("skipped", scope) + "spikes")
    noise = prefix("noise_scale", scope)
    return Signals(
        update_ratio=ratios,
        band=band,
        spike=_largest_spike(run, scope),
        skipped_spikes=None if skipped is None else int(skipped[1]),
        batch_ratio=Spread.of(run.series(noise + "batch_ratio")[1]),
        b_simple=Spread.of(run.series(noise + "b_simple")[1]),
        clip_fraction=clip_share(*run.series(prefix("clip", scope) + "fraction")),
    )


def _ratio(signals: Signals) -> float | None:
    spread = signals.update_ratio.get(GLOBAL)
    return None if spread is None else spread.median


#: The columns of the groups' table: (title, value of one run's `Signals`).
COLUMNS = (
    ("update ratio", _ratio),
    ("max spike", lambda s: None if s.spike is None else s.spike[0]),
    ("skipped spikes", lambda s: s.skipped_spikes),
    ("clipped", lambda s: s.clip_fraction),
    ("batch_ratio", lambda s: None if s.batch_ratio is None else s.batch_ratio.last),
    ("b_simple", lambda s: None if s.b_simple is None else s.b_simple.last),
)


@dataclasses.dataclass(frozen=True)
class SignalGroup:
    """The signals of a group of runs (seeds), each the median over the runs
    that wrote it: `values[title] = (median, runs with it)` for the titles
    of `COLUMNS` (the update ratio: each run's median of "global"; the
    noise scale: each run's last value)."""

    key: str
    runs: list[str]
    values: dict[str, tuple[float, int]]


def signal_groups(
    members: dict[str, list[tuple[str, Signals]]],
) -> list[SignalGroup]:
    """`SignalGroup`s of `{key: [(run title, signals)]}`, in key order;
    groups without any signal are left out.

    Example:

    >>> runs = [("a_seed0", Signals({}, skipped_spikes=1)),
    ...         ("a_seed1", Signals({}, skipped_spikes=3))]
    >>> signal_groups({"a": runs})[0].values
    {'skipped spikes': (2.0, 2)}
    """
    groups = []
    for key, runs in sorted(members.items()):
        values = {}
        for title, get in COLUMNS:
            found = [get(signals) for _, signals in runs]
            found = [float(v) for v in found if v is not None]
            if found:
                values[title] = (float(np.median(found)), len(found))
        if values:
            groups.append(SignalGroup(key, [name for name, _ in runs], values))
    return groups


def group_signals(reports: list[RunReport], pattern: str) -> list[SignalGroup]:
    """The signals of the reports whose run name matches `pattern`
    (`re.search`), grouped by `--group`'s key (`rl.group_key`; a scoped
    optimizer's reports form a group of their own, "<key> [<scope>]").

    Example:

    >>> [g.key for g in group_signals(reports, r"(.*)_seed\\d+")]  # doctest: +SKIP
    ['adam', 'sgd [actor]']
    """
    compiled, members = re.compile(pattern), {}
    for report in reports:
        match = compiled.search(report.run)
        if match is None or report.signals is None:
            continue
        key = group_key(match)[0]
        key = f"{key} [{report.scope}]" if report.scope else key
        members.setdefault(key, []).append((report.title, report.signals))
    return signal_groups(members)
