"""A run's alert records in bounded memory: the first records of each
incident key kept whole, beside exact numbers over every record.

A run that alerts at every step on many subjects writes millions of alert
records; the report needs them for its alert list (a sample is enough), its
counts per tier and `--fail-on` (exact), and its alert timeline (exact
incidents). So `AlertStore` keeps the first `keep` records of each (scope,
rule, subject, tier), and for every record its count and its incident: the
incidents are grouped as `keras_gradmon.alerts.incidents.group_alerts`
groups them (a repeat more than `fold_steps` steps after the last alert of
its key opens a new one), whatever order the records come in. Memory grows
with the keys and the incidents, not with the records.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from keras_gradmon.alerts.events import Alert
from keras_gradmon.alerts.incidents import DEFAULT_FOLD_STEPS, Incident
from keras_gradmon.report.timeline import Timeline

#: The records of one (scope, rule, subject, tier) kept whole.
KEEP_PER_KEY = 100

#: (scope, rule, subject, tier).
StoreKey = tuple[Any, str, str, str]


@dataclasses.dataclass(frozen=True)
class AlertCounts:
    """Exact numbers over the alert records of one tag scope.

    Attributes:
        total: The records.
        tiers: `{tier: records}`.
        incidents: Every incident, in order of first step.
        unreadable: Records no `Alert` can hold (in `total`, in no incident).
        not_kept: Records counted but not kept whole (`Run.alerts`).
        fold_steps: Quiet steps that end an incident.
    """

    total: int
    tiers: Mapping[str, int]
    incidents: list[Incident]
    unreadable: int
    not_kept: int
    fold_steps: int = DEFAULT_FOLD_STEPS

    def timeline(self, rename: Callable[[Alert], Alert] | None = None) -> Timeline:
        """The alert timeline, each incident's alerts through `rename`."""
        incidents = self.incidents
        if rename is not None:
            incidents = [
                dataclasses.replace(
                    i, first=rename(i.first), last=rename(i.last), worst=rename(i.worst)
                )
                for i in incidents
            ]
        readable = self.total - self.unreadable
        return Timeline(incidents, readable, self.unreadable, self.fold_steps)


class AlertStore:
    """The alert records of a run: the first `keep` of each (scope, rule,
    subject, tier) whole, and exact counts and incidents of all.

    Args:
        keep: Records kept whole per key (None: all).
        fold_steps: Quiet steps that end an incident.

    Example:

    >>> store = AlertStore(keep=2)
    >>> for step in [*range(10, 20), 500]:
    ...     store.add(Alert("spike", "warning", step, 9.0, 4.0, "global").to_dict())
    >>> counts = store.counts(None)
    >>> len(store.kept), counts.total, counts.not_kept
    (2, 11, 9)
    >>> [i.span() for i in counts.incidents]
    ['10 summaries, steps 10 to 19', '1 summary, steps 500 to 500']
    """

    def __init__(
        self, keep: int | None = KEEP_PER_KEY, fold_steps: int = DEFAULT_FOLD_STEPS
    ) -> None:
        self.keep = keep
        self.fold_steps = fold_steps
        self.kept: list[dict] = []
        self._counts: dict[StoreKey, int] = {}
        self._unreadable: dict[Any, int] = {}
        self._incidents: dict[StoreKey, list[Incident]] = {}

    def add(self, record: dict) -> None:
        """Counts `record` (an `Alert.to_dict()` dict with its "scope"),
        groups it into its incident, and keeps it whole if its key has
        fewer than `keep` kept."""
        scope = record.get("scope")
        try:
            alert = Alert.from_dict(record)
        except (KeyError, TypeError, ValueError):
            self._unreadable[scope] = self._unreadable.get(scope, 0) + 1
            self.kept.append(record)
            return
        key = (scope, alert.rule, alert.subject, alert.tier)
        count = self._counts[key] = self._counts.get(key, 0) + 1
        if self.keep is None or count <= self.keep:
            self.kept.append(record)
        _take(self._incidents.setdefault(key, []), alert, self.fold_steps)

    def counts(self, scope: Any) -> AlertCounts:
        """The exact numbers of the records of tag scope `scope`."""
        tiers: dict[str, int] = {}
        incidents = []
        for key, count in self._counts.items():
            if key[0] == scope:
                tiers[key[3]] = tiers.get(key[3], 0) + count
                incidents += self._incidents[key]
        incidents.sort(key=lambda incident: incident.first.step)
        unreadable = self._unreadable.get(scope, 0)
        total = sum(tiers.values()) + unreadable
        kept = sum(1 for record in self.kept if record.get("scope") == scope)
        return AlertCounts(
            total, tiers, incidents, unreadable, total - kept, self.fold_steps
        )

    @property
    def not_kept(self) -> int:
        """Records counted but not kept whole, over every scope."""
        return (
            sum(self._counts.values()) + sum(self._unreadable.values()) - len(self.kept)
        )


def _take(spans: list[Incident], alert: Alert, fold_steps: int) -> None:
    """Adds `alert` to the incidents of its key (`spans`, in step order),
    joining or opening one, and joining the incidents it bridges."""
    if spans and alert.step >= spans[-1].last.step:  # in order: the usual case
        if alert.step - spans[-1].last.step <= fold_steps:
            spans[-1].add(alert)
        else:
            spans.append(Incident.open(alert, fold_steps))
        return
    at = bisect.bisect_right([s.first.step for s in spans], alert.step)
    spans.insert(at, Incident.open(alert, fold_steps))
    for i in (at, at - 1):  # with the next one, then with the one before
        near = 0 <= i < len(spans) - 1
        if near and spans[i + 1].first.step - spans[i].last.step <= fold_steps:
            spans[i : i + 2] = [_joined(spans[i], spans[i + 1])]


def _joined(early: Incident, late: Incident) -> Incident:
    """One incident of two of a key, `early` opened first."""
    last = late.last if late.last.step >= early.last.step else early.last
    worst = early.worst
    if early.worst.comparison.startswith("<"):
        worst = late.worst if late.worst.value < worst.value else worst
    elif late.worst.value > worst.value:
        worst = late.worst
    return dataclasses.replace(
        early, last=last, worst=worst, count=early.count + late.count
    )


def counts_of(alerts: list[dict]) -> AlertCounts:
    """The exact numbers of `alerts`, all of them kept, whatever their
    scope.

    Example:

    >>> counts_of([Alert("spike", "warning", 3, 9.0, 4.0, "global").to_dict()]).tiers
    {'warning': 1}
    """
    store = AlertStore(keep=None)
    for alert in alerts:
        store.add({**alert, "scope": None})
    return store.counts(None)
