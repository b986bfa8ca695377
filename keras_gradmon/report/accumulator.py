"""A run's numbers gathered from its values, whatever reads them: the
report's event-file reader (`report.events`) and the TensorBoard dashboard
(through TensorBoard's data provider) feed the same `RunAccumulator`, which
builds the report's `Run`.

Memory is bounded per tag (`series.Series`): a long run costs what a short
one does, up to `max_points` kept points per tag. Histograms are only
named (the report reads no bucket); a keras_gradmon `Table` reads as the
scalar tags it stands for (`Table.scalars`), so that a run reads alike
whether its per-variable numbers were written as a table or as scalars.
Values of other plugins (images, graphs, hyperparameters, ...) are not the
report's and are left out; values the report should read and cannot are
counted in `Run.unread`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from keras_gradmon.alerts.events import ALERT_LOG
from keras_gradmon.alerts.log import (
    ALERTS_KIND,
    decode_alerts,
    legacy_alert_lines,
    merge_alerts,
)
from keras_gradmon.columns import PLUGIN_NAME
from keras_gradmon.columns import tag as column_tag
from keras_gradmon.report.alert_store import KEEP_PER_KEY, AlertStore
from keras_gradmon.report.records import FileDamage
from keras_gradmon.report.series import BATCH, MAX_POINTS, Peaks, Series

#: Table columns read only where the variable had a gradient, and those left
#: out where not finite (as `Table.scalars` reads them).
_NEEDS_GRAD = ("grad_", "update_ratio")
_OPTIONAL = ("grad_to_weight", "update_ratio")


@dataclasses.dataclass
class Run:
    """The numbers of one run (one directory of event files).

    Attributes:
        name: The directory relative to the log directory (the log
            directory's own name for itself).
        scalars: `{tag: Series}` of every scalar: `{step: value}` of its
            kept points, and exact aggregates (`series.Series`). Plain
            `{step: value}` mappings given here are kept whole.
        histogram_tags: The histogram tags.
        alerts: The alerts written by keras_gradmon (`Alert.to_dict()`
            dicts, plus the "scope" of their tag), in step order: those
            kept whole (`alert_store`).
        damaged: The damaged event files of the run, if any.
        unread: Values the report should have read and could not, by reason.
        alert_store: Exact counts and incidents of every alert record
            (`AlertStore`); None: of `alerts`, all of them kept.

    Example:

    >>> run = Run("r", {"grad_norm/global": {0: 1.0, 10: 4.0}}, [], [])
    >>> run.series("grad_norm/global")
    (array([ 0, 10]), array([1., 4.]))
    >>> run.stats("grad_norm/global").high_step
    10
    """

    name: str
    scalars: Mapping[str, Series]
    histogram_tags: list[str]
    alerts: list[dict]
    damaged: list[FileDamage] = dataclasses.field(default_factory=list)
    unread: dict[str, int] = dataclasses.field(default_factory=dict)
    alert_store: AlertStore | None = None

    def __post_init__(self) -> None:
        self.scalars = {
            name: points if isinstance(points, Series) else _whole(points)
            for name, points in self.scalars.items()
        }
        if self.alert_store is None:
            self.alert_store = AlertStore(keep=None)
            for alert in self.alerts:
                self.alert_store.add(alert)

    def series(self, tag: str) -> tuple[np.ndarray, np.ndarray]:
        """`(steps, values)` of a scalar tag's kept points, sorted by step
        (empty if absent)."""
        return self.stats(tag).kept()

    @property
    def unread_notes(self) -> list[str]:
        """A sentence per reason in `unread`, naming the run, and one for
        the points written again at steps folded in before (`Series.
        rewritten`: a resumed run)."""
        notes = [
            f"run {self.name!r}: {count:,} value(s) not read: {reason}"
            for reason, count in sorted(self.unread.items())
        ]
        if self.alert_store.not_kept:
            notes.append(
                f"run {self.name!r}: {self.alert_store.not_kept:,} alert record(s) "
                f"not kept (the first {self.alert_store.keep} of each rule, "
                "subject and tier are): the alert counts, --fail-on and the "
                "timeline count them all"
            )
        rewritten = sum(s.rewritten for s in self.scalars.values())
        if rewritten:
            notes.append(
                f"run {self.name!r}: {rewritten:,} scalar value(s) written again "
                "at steps read before (a resumed run): the plots and last "
                "values show the later value, the other exact figures the first"
            )
        return notes

    def stats(self, tag: str) -> Series:
        """The `Series` of a scalar tag (an empty one if absent)."""
        found = self.scalars.get(tag)
        return Series() if found is None else found


def _whole(points: Mapping[int, float]) -> Series:
    series = Series(max_points=None)
    series.extend(
        np.fromiter(points.keys(), np.int64, len(points)),
        np.fromiter(points.values(), np.float64, len(points)),
    )
    return series


@dataclasses.dataclass
class _Tables:
    """The rows of one table tag not yet expanded into its scalar tags."""

    tags: np.ndarray  # [rows, columns] object: the scalar tag of each cell
    keep: np.ndarray  # [columns] bool: not `grad_present`
    needs_grad: np.ndarray  # [columns] bool
    optional: np.ndarray  # [columns] bool
    present: int | None  # the `grad_present` column
    steps: list[int] = dataclasses.field(default_factory=list)
    values: list[np.ndarray] = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, names: Mapping) -> _Tables:
        rows, columns = list(names["rows"]), list(names["columns"])
        scope = names.get("scope")
        tags = np.array(
            [[column_tag(c, r, scope) for c in columns] for r in rows], dtype=object
        ).reshape(len(rows), len(columns))
        return cls(
            tags=tags,
            keep=np.array([c != "grad_present" for c in columns], bool),
            needs_grad=np.array([c.startswith(_NEEDS_GRAD) for c in columns], bool),
            optional=np.array([c.startswith(_OPTIONAL) for c in columns], bool),
            present=columns.index("grad_present")
            if "grad_present" in columns
            else None,
        )


class RunAccumulator:
    """Gathers one run's values into a `Run`, whatever reads them.

    Feed it each value once, in any order of tags (a tag's steps in step
    order are cheapest): scalars as `(step, float)`, tensors as NumPy arrays
    with their plugin name and plugin content (the content of the tag's
    latest metadata), histogram tags by name. Then `run()`.

    The alerts of a step are united over its events (`keras_gradmon.
    alerts.log.merge_alerts`): a recorder's later event of a step repeats
    its earlier alerts and counts them once; two event files writing alerts
    at one step both count. Events of a step more than `BATCH` alerting
    steps apart are not united.

    Args:
        max_points: Points kept per scalar tag (`series.Series`), or None:
            every point.
        max_alerts: Alert records kept whole per (scope, rule, subject,
            tier) (`alert_store.AlertStore`), or None: every record.

    Example:

    >>> acc = RunAccumulator(max_points=64)
    >>> for step in range(1000):
    ...     acc.add_scalar("grad_norm/global", step, float(step))
    >>> acc.add_histogram_tag("grad_hist/dense/kernel")
    >>> run = acc.run("r")
    >>> run.stats("grad_norm/global").count, len(run.scalars["grad_norm/global"])
    (1000, 33)
    """

    def __init__(
        self,
        max_points: int | None = MAX_POINTS,
        max_alerts: int | None = KEEP_PER_KEY,
    ) -> None:
        Series(max_points)  # validates it
        self.max_points = max_points
        self._scalars: dict[str, Series] = {}
        # Shared by the tags that differ in their last segment (`Peaks`).
        self._peaks: dict[str, Peaks] = {}
        self._histograms: set[str] = set()
        self._alerts = AlertStore(max_alerts)
        # The alert events of the latest steps, not yet united (`_unite`).
        self._alert_events: dict[int, list[list[dict]]] = {}
        self._contents: dict[str, tuple[bytes, dict | None]] = {}
        self._tables: dict[str, _Tables] = {}
        self._unread: dict[str, int] = {}

    def add_scalar(self, tag: str, step: int, value: float) -> None:
        """Adds one scalar point."""
        self._series(tag).add(step, value)

    def add_scalars(self, tag: str, steps: np.ndarray, values: np.ndarray) -> None:
        """Adds a scalar tag's points given as arrays."""
        if tag not in self._scalars and not np.size(steps):
            return  # no point: no tag
        self._series(tag).extend(steps, values)

    def add_scalar_batches(
        self, batches: Mapping[str, tuple[np.ndarray, np.ndarray]]
    ) -> None:
        """Adds the points of several tags (`{tag: (steps, values)}`) read
        together: each tag's highest point is noted (`Peaks`) before any
        is folded in, so that its sibling tags keep that step."""
        for tag, (steps, values) in batches.items():
            self._peaks_of(tag).offer(tag, steps, values)
        for tag, (steps, values) in batches.items():
            self.add_scalars(tag, steps, values)

    def _series(self, tag: str) -> Series:
        found = self._scalars.get(tag)
        if found is None:
            peaks = self._peaks_of(tag)
            found = self._scalars[tag] = Series(self.max_points, peaks, tag)
        return found

    def _peaks_of(self, tag: str) -> Peaks:
        group = tag.rsplit("/", 1)[0]
        found = self._peaks.get(group)
        if found is None:
            found = self._peaks[group] = Peaks()
        return found

    def add_histogram_tag(self, tag: str) -> None:
        """Names a histogram tag (its buckets are not the report's)."""
        self._histograms.add(tag)

    def add_tensor(
        self,
        tag: str,
        step: int,
        value: np.ndarray,
        plugin_name: str,
        content: bytes = b"",
    ) -> None:
        """Adds a tensor value of plugin `plugin_name` ("" for none):
        a scalar (plugin "scalars" or none), a histogram (its tag only),
        an alert log (plugin "text", tag `alert_log/...`) or a keras_gradmon
        record (plugin `keras_gradmon`, by its content's "kind")."""
        if plugin_name in ("scalars", ""):
            value = np.asarray(value)
            if value.size == 1 and value.dtype.kind in "fiu":
                self.add_scalar(tag, step, float(value.reshape(())))
        elif plugin_name == "histograms":
            self._histograms.add(tag)
        elif plugin_name == "text" and tag.split("/", 1)[0] == ALERT_LOG:
            lines = legacy_alert_lines(tag, value)
            self._add_alert_event(tag, step, lines.alerts)
            if lines.bad:
                reason = f"{tag}: lines that are no alert (JSON object)"
                self.count_unread(reason, lines.bad)
            if lines.garbled:
                reason = f"{tag}: lines that are not UTF-8 (read with U+FFFD)"
                self.count_unread(reason, lines.garbled)
        elif plugin_name == PLUGIN_NAME:
            self._add_record(tag, step, value, content)

    def add_alerts(self, alerts: Iterable[dict]) -> None:
        """Adds alerts already decoded (`keras_gradmon.alerts.log.
        decode_alerts` dicts, each with its "scope"), as a source that
        reads them itself (TensorBoard's data provider) has them, united
        with `merge_alerts`; a record without a whole-number step is counted
        as unread."""
        for alert in alerts:
            if _whole_number(alert.get("step")):
                self._keep_alert(alert)
            else:
                self.count_unread("alert records without a step")

    def count_unread(self, reason: str, count: int = 1) -> None:
        """Counts values that could not be read (`Run.unread`)."""
        self._unread[reason] = self._unread.get(reason, 0) + count

    def _add_record(
        self, tag: str, step: int, value: np.ndarray, content: bytes
    ) -> None:
        """The single dispatch point of keras_gradmon's own records, on the
        "kind" of their content (a tag's latest: a resumed run may name
        other rows)."""
        known = self._contents.get(tag)
        if known is None or known[0] != content:
            if tag in self._tables:  # rows read with the names they had
                self._expand(self._tables.pop(tag))
            known = self._contents[tag] = (content, _json(content))
        names = known[1]
        kind = names.get("kind") if names else None
        if kind == "variables":
            self._add_table(tag, step, value, names)
        elif kind == ALERTS_KIND:
            self._add_alerts(tag, step, value, names)
        else:
            self.count_unread(f"{tag}: a keras_gradmon record of kind {kind!r}")

    def _add_alerts(self, tag: str, step: int, value: np.ndarray, names: dict) -> None:
        """An alerts record (`keras_gradmon.alerts.log`)."""
        try:
            found = decode_alerts(json.dumps(names).encode(), value)
        except ValueError:
            self.count_unread(f"{tag}: alerts records that cannot be read")
            return
        self._add_alert_event(tag, step, found)

    def _add_alert_event(self, tag: str, step: int, found: list[dict]) -> None:
        """The alerts of one event of `tag`, kept to be united with the
        other events of their step; a record without a whole-number step
        is counted as unread."""
        good = [a for a in found if _whole_number(a.get("step"))]
        if len(good) < len(found):
            missing = len(found) - len(good)
            self.count_unread(f"{tag}: alert records without a step", missing)
        self._alert_events.setdefault(step, []).append(good)
        if len(self._alert_events) > BATCH:
            self._unite(len(self._alert_events) // 2)

    def _unite(self, steps: int | None = None) -> None:
        """Unites the events of the first `steps` steps read (None: all)
        with `merge_alerts`, and keeps their alerts."""
        chosen = list(self._alert_events)[:steps]
        events = [(s, e) for s in chosen for e in self._alert_events.pop(s)]
        for alert in merge_alerts(events):
            self._keep_alert(alert)

    def _keep_alert(self, alert: dict) -> None:
        self._alerts.add(alert)

    def _add_table(self, tag: str, step: int, value: np.ndarray, names: dict) -> None:
        tables = self._tables.get(tag)
        if tables is None:
            try:
                tables = self._tables[tag] = _Tables.of(names)
            except (KeyError, TypeError, ValueError):
                self._contents[tag] = {"kind": "unreadable table"}
                self.count_unread(f"{tag}: a table whose names cannot be read")
                return
        if np.shape(value) != tables.tags.shape:
            self.count_unread(
                f"{tag}: a table of shape {np.shape(value)}, not {tables.tags.shape}"
            )
            return
        tables.steps.append(step)
        tables.values.append(value)
        if len(tables.steps) >= BATCH:
            self._expand(tables)

    def _expand(self, tables: _Tables) -> None:
        """The buffered table rows as the scalar points they stand for (the
        cells `Table.scalars` reads), a tag at a time."""
        if not tables.steps:
            return
        steps = np.array(tables.steps, np.int64)
        values = np.stack(tables.values).astype(np.float64)  # [steps, rows, cols]
        tables.steps, tables.values = [], []
        read = np.broadcast_to(tables.keep, values.shape).copy()
        if tables.present is not None:
            missing = values[:, :, tables.present] <= 0  # [steps, rows]
            read &= ~(missing[:, :, None] & tables.needs_grad)
        read &= np.isfinite(values) | ~tables.optional
        batches = {}
        for (row, column), name in np.ndenumerate(tables.tags):
            if tables.keep[column]:
                mask = read[:, row, column]
                batches[name] = (steps[mask], values[mask, row, column])
        self.add_scalar_batches(batches)

    def run(self, name: str, damaged: Sequence[FileDamage] = ()) -> Run:
        """The `Run` of everything added so far."""
        for tables in self._tables.values():
            self._expand(tables)
        self._unite()
        return Run(
            name,
            dict(self._scalars),
            sorted(self._histograms),
            sorted(self._alerts.kept, key=lambda a: a["step"]),
            list(damaged),
            dict(self._unread),
            self._alerts,
        )


def _json(content: bytes) -> dict | None:
    try:
        found = json.loads(content)
    except (ValueError, TypeError):
        return None
    return found if isinstance(found, dict) else None


def _whole_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
