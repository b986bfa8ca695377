"""`MonitorWriter`: the one reader of a monitor's rings of recent summaries.

Every summary a `GradientMonitor` recorded is read back once, by its
writer, and published once to every hub linked to it (source "gradients"):
the hubs' recorders write its numbers, and their listeners (the alert
runners of `GradientMonitorCallback` and `AlertChecker`) get the metrics the
alert rules read with it. Whatever asks for the numbers (the callback, a
custom loop's `write_summaries`, an alert checker) goes through
`MonitorWriter.of(monitor)`, so two of them never read the ring twice, nor
write a summary twice. The reading back and the writing happen on a worker
thread (`Worker`), or at once with `write()`, or later on the caller's
thread (`take`, then `publish_taken` once the steps are done).

Example:

>>> writer = MonitorWriter.of(optimizer.monitor)  # doctest: +SKIP
>>> writer.link(Hub([TensorBoardRecorder("logs")]))  # doctest: +SKIP
>>> writer.write()  # after a train step  # doctest: +SKIP
True
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import queue
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from keras_gradmon import claims
from keras_gradmon.columns import (
    GLOBAL,
    Cursor,
    Entry,
    TagTable,
    latest_entry,
    parse,
    tag,
    unpack,
    variable_statistic,
)
from keras_gradmon.histogram_rows import histogram_rows
from keras_gradmon.hub import GRADIENTS, Hub, Publication, Recorder, chief_writes

if TYPE_CHECKING:
    from keras_gradmon.columns import HistogramSnapshot, Snapshot
    from keras_gradmon.core.monitor import GradientMonitor


_STOP = object()
_live: weakref.WeakSet = weakref.WeakSet()
#: The writers whose summaries a reader lets wait (`mark_waiting`).
_waiting: weakref.WeakSet = weakref.WeakSet()


class Worker:
    """Runs `process(item)` for each `put` item, in order, on a thread of its
    own (started on the first item); calls `idle()` whenever the queue runs
    dry. The queue holds at most `size` items: `put` waits when it is full.
    An error in the thread is raised again by the next `put` or `drain`.

    Example:

    >>> worker = Worker(print, idle=lambda: None, size=4)
    >>> worker.put("written on the worker thread")
    >>> worker.drain()
    written on the worker thread
    """

    def __init__(
        self, process: Callable[[Any], None], idle: Callable[[], None], size: int
    ) -> None:
        self._process = process
        self._idle = idle
        self._queue: queue.Queue = queue.Queue(maxsize=size)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        _live.add(self)

    def put(self, item: Any) -> None:
        """Queues `item` (waits while the queue is full)."""
        self._raise()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="keras_gradmon-writer", daemon=True
                )
                self._thread.start()
        self._queue.put(item)

    def drain(self) -> None:
        """Waits until every queued item is processed."""
        self._queue.join()
        self._raise()

    def stop(self) -> None:
        """Drains, then ends the thread (a later `put` starts a new one)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            self._raise()
            return
        self._queue.put(_STOP)
        thread.join()
        self._raise()

    def _raise(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                self._process(item)
                if self._queue.empty():
                    self._idle()
            except BaseException as error:  # raised again on the caller's thread
                self._error = self._error or error
            finally:
                self._queue.task_done()


@atexit.register
def _drain_all() -> None:
    """At interpreter exit, publishes the summaries left waiting (a run
    that raised mid-epoch), and lets every worker finish what it was
    given."""
    for writer in list(_waiting):
        with contextlib.suppress(Exception):
            writer.write()
    for worker in list(_live):
        # Exiting: an error has nobody left to be reported to.
        with contextlib.suppress(Exception):
            worker.drain()


logger = logging.getLogger("keras_gradmon")

#: The metrics `summary_metrics` builds itself, per variable too.
_NORM_METRICS = ("grad_norm", "grad_nonfinite")


class TaggedMetrics:
    """The other scalar tags of a monitor's summaries, as rule metrics:
    `<statistic>/<subject>` (`clip/fraction`, `update_ratio/<group>`,
    `spikes/max_norm`, `skipped/spikes`, ...) becomes
    `metrics[statistic][subject]`. Per-variable subjects are left out: the
    rules read global, group and step-wide values.

    Example:

    >>> TaggedMetrics(monitor.tags, monitor.paths).of(snapshot)  # doctest: +SKIP
    {'clip': {'pre_norm': 2.0, 'post_norm': 1.0, 'scale': 0.5, 'fraction': 1.0}}
    """

    def __init__(self, table: TagTable, paths: Sequence[str]) -> None:
        self.table = table
        scopes = () if table.scope is None else (table.scope,)
        variables = set(paths)
        self._parsed = {}
        for scalar in table.scalars:
            parsed = parse(scalar.tag, scopes)
            if not (
                parsed.statistic in _NORM_METRICS
                or variable_statistic(parsed.statistic)
                or parsed.subject in variables
            ):
                self._parsed[scalar.tag] = parsed

    def of(self, snapshot: Snapshot) -> dict[str, dict[str, float]]:
        """The metrics of one summary."""
        values = self.table.values_of(snapshot.values, snapshot.has_grad, self._parsed)
        metrics: dict[str, dict[str, float]] = {}
        for name, value in values.items():
            parsed = self._parsed[name]
            metrics.setdefault(parsed.statistic, {})[parsed.subject] = value
        return metrics


def summary_metrics(
    snapshot: Snapshot, tagged: TaggedMetrics | None = None
) -> dict[str, dict[str, float]]:
    """The numbers the rules read, from one snapshot: `grad_norm` and
    `grad_nonfinite` of "global", each group and each variable with a
    gradient; with `tagged`, the monitor's other scalar tags too (see
    `TaggedMetrics`).

    Example:

    >>> summary_metrics(snapshot)["grad_norm"]["global"]  # doctest: +SKIP
    0.81
    """
    norms = {GLOBAL: snapshot.totals["grad_norm"]}
    norms.update(zip(snapshot.groups, map(float, snapshot.group_grad_norm)))
    norms.update(snapshot.grad_stat("norm"))
    nonfinite = snapshot.grad_stat("nonfinite")
    metrics = {} if tagged is None else tagged.of(snapshot)
    return {**metrics, "grad_norm": norms, "grad_nonfinite": nonfinite}


def histogram_values(monitor: GradientMonitor, snapshot: HistogramSnapshot) -> dict:
    """`{tag: [k, 3] rows}` of every histogram in `snapshot` (gradient
    histograms of variables that had a gradient at that step)."""
    out = {}
    for entry in monitor.tags.histograms:
        row = entry.row
        if entry.kind == "grad" and snapshot.has_grad[row]:
            out[entry.tag] = histogram_rows(
                snapshot.grad_counts[row], snapshot.grad_range[row]
            )
        elif entry.kind == "weight":
            out[entry.tag] = histogram_rows(
                snapshot.weight_counts[row], snapshot.weight_range[row]
            )
    return out


def _immediate(recorder: Recorder) -> bool:
    return bool(getattr(recorder, "immediate", False))


class MonitorWriter:
    """Reads a `GradientMonitor`'s recorded summaries back, once each, and
    publishes them to every linked hub (see the module docstring).

    `capture()` is what the training thread calls after a step that may
    have recorded: a few raw variable reads of the monitor's rings, no wait
    for the device; the worker thread then reads the numbers, builds the
    tags and publishes every summary recorded since the last look, in step
    order. Its queue is bounded (`capture` waits when it is full:
    back-pressure, not memory), and it flushes the hubs whenever it runs
    dry, so everything captured lands in the files even if training stops
    with an exception. `write()` does the same at once, after whatever is
    queued; `take()` captures for `publish_taken()`, which publishes on the
    caller's thread when it is called (the callback's alert rules on JAX, a
    batch later). Recorders marked `immediate` (Keras logs) get the newest
    summary of a capture when `write_immediate()` is called, where the logs
    are filled.

    More summaries recorded between two looks than the state keeps
    (`summary_history`) are counted, written as `dropped/summaries` (and
    `dropped/histograms`), and reported once on the console. Under a
    multi-worker strategy only the chief writes (TensorFlow's
    `strategy.extended.should_save_summary`); the other workers read the
    same numbers (`latest`) and publish them to listeners only.

    Args:
        monitor: The monitor (a wrapper's `.monitor`).
        recorders: Recorders of a hub of this writer's own, linked now.
        label: How errors name the monitored optimizer.
        queue_size: The most captures waiting for the worker.
        hub: A hub to link now (shared with other monitors).

    Example:

    >>> writer = MonitorWriter.of(optimizer.monitor)  # doctest: +SKIP
    >>> writer.link(Hub([TensorBoardRecorder("logs")]))  # doctest: +SKIP
    """

    def __init__(
        self,
        monitor: GradientMonitor,
        recorders: Sequence[Recorder] | None = None,
        label: str = "",
        queue_size: int = 32,
        hub: Hub | None = None,
    ) -> None:
        self.monitor = monitor
        self.label = label or "optimizer"
        self.hubs: list[Hub] = []
        if recorders or hub is None:
            self.link(Hub(recorders))
        if hub is not None:
            self.link(hub)
        self.latest: Snapshot | None = None
        #: Whether the last look found no fresh summary where one was due (a
        #: skipped step delays it): the caller looks again after each step.
        self.missed = False
        self._claimed: set[int] = set()
        self._cursors: dict[str, Cursor] = {}
        self._warned = False
        self._immediate_pending: Any = None
        self._tagged: TaggedMetrics | None = None
        self._writes: tuple[Any, bool] | None = None
        self._worker = Worker(self._process, self.flush, queue_size)
        # The monitor holds its one writer (not a registry: a monitor that
        # is gone takes its writer, and its destinations' claims, along).
        monitor.__dict__.setdefault("_writer", self)

    @classmethod
    def of(cls, monitor: GradientMonitor, label: str = "") -> MonitorWriter:
        """The one writer of `monitor`, made on first use.

        Example:

        >>> MonitorWriter.of(monitor) is MonitorWriter.of(monitor)  # doctest: +SKIP
        True
        """
        writer = monitor.__dict__.get("_writer")
        if writer is None:
            writer = cls(monitor, label=label, hub=Hub())
        elif label and writer.label == "optimizer":
            writer.label = label
        return writer

    @staticmethod
    def write_recorded(monitor: GradientMonitor) -> None:
        """Publishes what `monitor` recorded, if it has a writer: called
        before its state is saved, because a run restored from that state
        leaves the rows it holds unwritten (`skip_recorded`).

        Example:

        >>> MonitorWriter.write_recorded(optimizer.monitor)  # doctest: +SKIP
        """
        writer = monitor.__dict__.get("_writer")
        if writer is not None and monitor.built:
            writer.write()

    @property
    def hub(self) -> Hub:
        """The first linked hub."""
        return self.hubs[0]

    @property
    def recorders(self) -> list[Recorder]:
        """The linked hubs' recorders."""
        return [r for hub in self.hubs for r in hub.recorders]

    def link(self, hub: Hub) -> Hub:
        """Publishes to `hub` too from now on (once); returns it."""
        if not any(h is hub for h in self.hubs):
            self.hubs.append(hub)
        return hub

    def unlink(self, hub: Hub) -> None:
        """Publishes no more to `hub` (write what is fresh first)."""
        self.hubs = [h for h in self.hubs if h is not hub]

    @property
    def writes(self) -> bool:
        """Whether this process writes (False on non-chief workers): asked
        once for each state variable (its strategy is fixed)."""
        variable = self.monitor.state.scalars.steps
        if self._writes is None or self._writes[0] is not variable:
            self._writes = (variable, chief_writes(variable))
        return self._writes[1]

    @property
    def dropped(self) -> dict[str, int]:
        """`{"summaries": n, "histograms": n}`: recorded, never written."""
        kinds = ("summaries", "histograms")
        return {kind: self._cursor(kind).dropped for kind in kinds}

    def _cursor(self, kind: str) -> Cursor:
        if kind not in self._cursors:
            self._cursors[kind] = Cursor(self.monitor.layout.history)
        return self._cursors[kind]

    def skip_recorded(self) -> None:
        """Treats the summaries the state already holds as written, when
        this writer has not read any yet: a state restored from a
        checkpoint (`BackupAndRestore`, a resumed run) holds rows the
        process that made them wrote already. Call it where training starts,
        after any restore, before the first step."""
        if not self.monitor.built or self._cursors:
            return
        scalars, histograms = self.monitor.state.counts()
        self._cursor("summaries").seen = scalars
        self._cursor("histograms").seen = histograms

    def claim(self) -> None:
        """Claims the monitor's tag scope at every destination of the linked
        hubs (once per hub)."""
        fresh = [hub for hub in self.hubs if id(hub) not in self._claimed]
        if not fresh:
            return
        # The recorders themselves: a derived scope is announced through
        # their `write_text`.
        placed = [r for r in self.recorders if r.destination is not None]
        claims.claim_monitor(self.monitor, placed, self.label)
        self._claimed.update(id(hub) for hub in fresh)

    def capture(self, scalars: bool = True, histograms: bool = False) -> None:
        """Takes the recent statistics (and histograms) for the worker thread
        to publish."""
        item = self.take(scalars, histograms)
        if item is not None:
            self._worker.put(item)

    def take(self, scalars: bool = True, histograms: bool = False) -> tuple | None:
        """The recent statistics (and histograms), captured without waiting
        for the device, for `publish_taken` (None before the monitor is
        built). The Keras logs get the newest of them (`write_immediate`).

        Example:

        >>> taken = writer.take()  # doctest: +SKIP
        >>> writer.publish_taken(taken)  # later: waits for those steps only
        """
        if not self.monitor.built:
            return None
        self.claim()
        state = self.monitor.state
        item = (
            state.capture_scalars() if scalars else None,
            state.capture_histograms() if histograms else None,
        )
        if scalars:
            self._immediate_pending = item[0]
        return item

    def publish_taken(self, item: tuple) -> bool:
        """Publishes what `take` captured, now, on this thread, after
        whatever is queued (its listeners, the alert rules, run here), and
        flushes it to its files, if it holds summaries not published yet
        (another reader's capture may have published them first: that is
        no miss); returns whether it did.

        Example:

        >>> taken = writer.take(scalars=True)  # doctest: +SKIP
        >>> writer.publish_taken(taken)  # a step later: that step is done
        True
        """
        self.drain()
        scalars, histograms = item
        fresh = any(
            unpack(captured)[0] > self._cursor(kind).seen
            for kind, captured in (("summaries", scalars), ("histograms", histograms))
            if captured is not None
        )
        if fresh:
            self._process(item)
            self.flush()
        return fresh

    def write(self) -> bool:
        """Publishes fresh scalars and histograms now, after whatever is
        queued, and flushes them to their files; returns whether there were
        any."""
        if not self.monitor.built:
            return False
        self.drain()
        scalars, histograms = self.monitor.state.counts()
        fresh_stats = scalars > self._cursor("summaries").seen
        fresh_hist = histograms > self._cursor("histograms").seen
        if not (fresh_stats or fresh_hist):
            return False
        return self.publish_taken(self.take(fresh_stats, fresh_hist))

    def mark_waiting(self, waiting: bool) -> None:
        """Says that recorded summaries wait for a later read (a reader's
        `read_every`), or no longer: those waiting at interpreter exit are
        published then.

        Example:

        >>> writer.mark_waiting(True)  # doctest: +SKIP
        """
        if waiting:
            _waiting.add(self)
        else:
            _waiting.discard(self)

    @property
    def immediate_pending(self) -> bool:
        """Whether a capture waits for `write_immediate`."""
        return self._immediate_pending is not None

    def write_immediate(self) -> None:
        """Gives the `immediate` recorders (Keras logs) the newest summary of
        the last capture, if not given yet. Called where the logs are filled:
        reading the numbers waits for the step that made them, which on JAX
        is then the thread Keras runs the batch hooks on, not training's."""
        captured, self._immediate_pending = self._immediate_pending, None
        if captured is None:  # most batches: nothing captured since
            return
        immediate = [r for r in self.recorders if _immediate(r)]
        if not immediate:
            return
        entry = latest_entry(self.monitor.layout.history, *unpack(captured))
        if entry is None:
            return
        snapshot = self.monitor.scalar_values(entry.step, *entry.payloads)
        wanted = {t for r in immediate for t in getattr(r, "keys", {}).values()}
        values = self.monitor.tags.values_of(
            snapshot.values, snapshot.has_grad, wanted
        )
        publication = Publication(snapshot.step, GRADIENTS, scalars=values)
        for hub in self.hubs:
            hub.write(publication, [r for r in hub.recorders if _immediate(r)])

    def _process(self, item: tuple) -> None:
        scalars, histograms = item
        fresh = False
        if scalars is not None:
            entries, lost = self._cursor("summaries").new(*unpack(scalars))
            for entry in entries:
                snapshot = self.monitor.scalar_values(entry.step, *entry.payloads)
                self._publish_scalars(snapshot)
            self._report_lost("summaries", lost, entries)
            fresh = bool(entries)
        if histograms is not None:
            entries, lost = self._cursor("histograms").new(*unpack(histograms))
            for entry in entries:
                snapshot = self.monitor.histogram_values(entry.step, *entry.payloads)
                if self.writes:
                    values = histogram_values(self.monitor, snapshot)
                    self._publish(snapshot.step, histograms=values)
            self._report_lost("histograms", lost, entries)
            fresh = fresh or bool(entries)
        self.missed = not fresh

    def _publish(self, step: int, deferred: bool = False, **numbers: Any) -> None:
        """Publishes to every linked hub: to its listeners, and to its
        recorders (`deferred`: those not written at once, Keras logs aside)."""
        publication = Publication(step, GRADIENTS, origin=self.monitor, **numbers)
        for hub in list(self.hubs):
            recorders = hub.recorders
            if deferred:
                recorders = [r for r in recorders if not _immediate(r)]
            hub.publish(publication, recorders)

    def _publish_scalars(self, snapshot: Snapshot) -> None:
        """One summary: its tags for the recorders (where this process
        writes) and its metrics for the listeners (the alert runners)."""
        writes, tags = self.writes, self.monitor.tags
        values, tables = {}, ()
        if writes:
            values = tags.scalar_values(snapshot.values, snapshot.has_grad)
            if tags.table is not None:
                tables = (tags.table.table(snapshot.values),)
        metrics = {}  # what only the listeners (alert rules) read
        if any(hub.listens_to(self.monitor) for hub in self.hubs):
            metrics = summary_metrics(snapshot, self._tagged_metrics())
        self._publish(
            snapshot.step, True, scalars=values, tables=tables, metrics=metrics,
            record=writes,
        )
        self.latest = snapshot

    def _tagged_metrics(self) -> TaggedMetrics:
        """The metrics reader of the monitor's current tag table (rebuilt
        when the table is, e.g. under a derived scope)."""
        monitor = self.monitor
        if self._tagged is None or self._tagged.table is not monitor.tags:
            self._tagged = TaggedMetrics(monitor.tags, monitor.paths)
        return self._tagged

    def _report_lost(self, kind: str, lost: int, entries: list[Entry]) -> None:
        """Writes the count of `kind` lost so far (and says so, once)."""
        if not lost:
            return
        total = self._cursor(kind).dropped
        if not self._warned:
            self._warned = True
            logger.warning(
                "keras_gradmon: %d recorded %s of %r were overwritten before "
                "they could be written (more were recorded between two reads "
                "than the state keeps). Raise `summary_history` (now %d) to "
                "keep them; the count is written as dropped/%s.",
                lost,
                kind,
                self.label,
                self.monitor.layout.history,
                kind,
            )
        step = entries[0].step if entries else -1
        if self.writes and step >= 0:
            name = tag("dropped", kind, self.monitor.tags.scope)
            self._publish(step, scalars={name: float(total)})

    def drain(self) -> None:
        """Waits until every capture so far is published (re-raising a
        worker's error here, on the caller's thread)."""
        self._worker.drain()

    def flush(self) -> None:
        """Flushes the linked hubs' recorders."""
        for hub in list(self.hubs):
            hub.flush()

    def close(self) -> None:
        """Drains and publishes what is fresh; ends the worker thread (a
        later capture starts a new one). The hubs are their owners' to
        close."""
        self.write()
        self._worker.stop()
