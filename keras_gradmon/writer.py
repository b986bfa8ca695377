"""`Worker`: one daemon thread that processes queued items in order, so that
reading back and writing happen off the training thread.

`MonitorWriter`: publishes a monitor's fresh statistics to a `Hub` (and
so to its recorders), once each, from a worker thread.
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
from keras_gradmon.columns import Cursor, Entry, latest_entry, tag, unpack
from keras_gradmon.core.histogram import histogram_rows
from keras_gradmon.hub import GRADIENTS, Hub, Publication, Recorder, chief_writes

if TYPE_CHECKING:
    from keras_gradmon.columns import HistogramSnapshot, Snapshot
    from keras_gradmon.core.monitor import GradientMonitor


# ---- from recorders.worker ----

_STOP = object()
_live: weakref.WeakSet = weakref.WeakSet()


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
    """At interpreter exit, lets every worker finish what it was given."""
    for worker in list(_live):
        # Exiting: an error has nobody left to be reported to.
        with contextlib.suppress(Exception):
            worker.drain()


# ---- from recorders.writer ----

logger = logging.getLogger("keras_gradmon")


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


class MonitorWriter:
    """Publishes every summary a `GradientMonitor` recorded to a `Hub`, once
(source "gradients"): the hub's recorders write it.

    `capture()` is what the training thread calls after a step that may
    have recorded: a few raw variable reads of the monitor's rings of
    recent summaries (`keras_gradmon.core.state`), no wait for the device.
    With `asynchronous=True` a worker thread then reads the numbers, builds
    the tags and writes every summary recorded since the last capture, in
    step order; its queue is bounded (`capture` waits when it is full:
    back-pressure, not memory), and it flushes the recorders whenever it
    runs dry, so everything captured lands in the files even if training
    stops with an exception. `close()` drains the queue, writes what is
    fresh and closes the recorders. Recorders marked `immediate` (Keras
    logs) get the newest summary of a capture when `write_immediate()` is
    called, where the logs are filled.

    More summaries recorded between two captures than the state keeps
    (`summary_history`) are counted, written as `dropped/summaries` (and
    `dropped/histograms`), and reported once on the console.

    Under a multi-worker strategy only the chief writes (TensorFlow's
    `strategy.extended.should_save_summary`); the other workers read the
    same numbers (`latest`, for Keras logs) and write nothing.

    Args:
        monitor: The monitor (a wrapper's `.monitor`).
        recorders: Where to write: added to the hub.
        label: How errors name the monitored optimizer.
        asynchronous: Read back and write on a worker thread.
        queue_size: The most captures waiting for the worker.
        hub: A hub shared with other monitors (activations, RL health);
            None: a hub of this writer's own, closed by `close()` (a shared
            one is flushed, and closed by its owner).

    Example:

    >>> writer = MonitorWriter(  # doctest: +SKIP
    ...     optimizer.monitor, [TensorBoardRecorder("logs")])
    >>> writer.write()  # after a train step  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        monitor: GradientMonitor,
        recorders: Sequence[Recorder] | None = None,
        label: str = "",
        asynchronous: bool = False,
        queue_size: int = 32,
        hub: Hub | None = None,
    ) -> None:
        self.monitor = monitor
        self._owns_hub = hub is None
        self.hub = Hub() if hub is None else hub
        for recorder in recorders or ():
            self.hub.add(recorder)
        self.label = label or "optimizer"
        self.latest: Snapshot | None = None
        #: Whether the last look found no fresh summary where one was due (a
        #: skipped step delays it): the caller looks again after each step.
        self.missed = False
        self._claimed = False
        self._cursors: dict[str, Cursor] = {}
        self._warned = False
        self._immediate_pending: Any = None
        self._worker = (
            Worker(self._process, self.flush, queue_size) if asynchronous else None
        )

    @property
    def recorders(self) -> list[Recorder]:
        """The hub's recorders."""
        return self.hub.recorders

    @property
    def immediate(self) -> list[Recorder]:
        """The recorders written on the capturing thread (Keras logs)."""
        return [r for r in self.recorders if getattr(r, "immediate", False)]

    @property
    def writes(self) -> bool:
        """Whether this process writes (False on non-chief workers)."""
        return chief_writes(self.monitor.state.scalars.count)

    @property
    def dropped(self) -> dict[str, int]:
        """`{"summaries": n, "histograms": n}`: recorded, never written."""
        kinds = ("summaries", "histograms")
        return {kind: self._cursor(kind).dropped for kind in kinds}

    def _cursor(self, kind: str) -> Cursor:
        if kind not in self._cursors:
            self._cursors[kind] = Cursor(self.monitor.layout.history)
        return self._cursors[kind]

    def claim(self) -> None:
        """Claims the monitor's tag scope at every destination (once)."""
        if self._claimed:
            return
        # The recorders themselves: a derived scope is announced through
        # their `write_text`.
        placed = [r for r in self.recorders if r.destination is not None]
        claims.claim_monitor(self.monitor, placed, self.label)
        self._claimed = True

    def capture(self, scalars: bool = True, histograms: bool = False) -> None:
        """Takes the recent statistics (and histograms) for writing: on the
        worker thread if asynchronous, else now."""
        if not self.monitor.built:
            return
        self.claim()
        state = self.monitor.state
        item = (
            state.capture_scalars() if scalars else None,
            state.capture_histograms() if histograms else None,
        )
        if scalars and self.immediate:
            self._immediate_pending = item[0]
        if self._worker is None:
            self._process(item)
        else:
            self._worker.put(item)

    def write_immediate(self) -> None:
        """Gives the `immediate` recorders (Keras logs) the newest summary of
        the last capture, if not given yet. Called where the logs are filled:
        reading the numbers waits for the step that made them, which on JAX
        is then the thread Keras runs the batch hooks on, not training's."""
        captured, self._immediate_pending = self._immediate_pending, None
        if captured is not None:
            self._write_immediate(captured, self.immediate)

    def _write_immediate(self, captured: tuple, immediate: list[Recorder]) -> None:
        entry = latest_entry(self.monitor.layout.history, *unpack(captured))
        if entry is None:
            return
        snapshot = self.monitor.scalar_values(entry.step, *entry.payloads)
        wanted = {t for r in immediate for t in getattr(r, "keys", {}).values()}
        values = self.monitor.tags.values_of(
            snapshot.values, snapshot.has_grad, wanted
        )
        publication = Publication(snapshot.step, GRADIENTS, scalars=values)
        self.hub.write(publication, immediate)

    def _publish(self, step: int, recorders: list[Recorder], **numbers: dict) -> None:
        publication = Publication(step, GRADIENTS, origin=self.monitor, **numbers)
        self.hub.publish(publication, recorders)

    def _process(self, item: tuple) -> None:
        scalars, histograms = item
        fresh = False
        if scalars is not None:
            entries, lost = self._cursor("summaries").new(*unpack(scalars))
            for entry in entries:
                snapshot = self.monitor.scalar_values(entry.step, *entry.payloads)
                self._write_scalars(snapshot)
            self._report_lost("summaries", lost, entries)
            fresh = bool(entries)
        if histograms is not None:
            entries, lost = self._cursor("histograms").new(*unpack(histograms))
            for entry in entries:
                snapshot = self.monitor.histogram_values(entry.step, *entry.payloads)
                self._write_histograms(snapshot)
            self._report_lost("histograms", lost, entries)
            fresh = fresh or bool(entries)
        self.missed = not fresh

    def write(self) -> bool:
        """Writes fresh scalars and histograms now, after whatever is queued,
        and flushes them to their files; returns whether there were any."""
        if not self.monitor.built:
            return False
        self.drain()
        scalars, histograms = self.monitor.state.counts()
        fresh_stats = scalars > self._cursor("summaries").seen
        fresh_hist = histograms > self._cursor("histograms").seen
        if fresh_stats or fresh_hist:
            self.claim()
            state = self.monitor.state
            self._process(
                (
                    state.capture_scalars() if fresh_stats else None,
                    state.capture_histograms() if fresh_hist else None,
                )
            )
            self.flush()
        return fresh_stats or fresh_hist

    def _deferred(self) -> list[Recorder]:
        """The recorders written from the queue: all but the immediate ones."""
        return [r for r in self.recorders if not getattr(r, "immediate", False)]

    def _write_scalars(self, snapshot: Snapshot) -> None:
        if self.writes:
            values = self.monitor.tags.scalar_values(snapshot.values, snapshot.has_grad)
            self._publish(snapshot.step, self._deferred(), scalars=values)
        self.latest = snapshot

    def _write_histograms(self, snapshot: HistogramSnapshot) -> None:
        if self.writes:
            values = histogram_values(self.monitor, snapshot)
            self._publish(snapshot.step, self.recorders, histograms=values)

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
            self._publish(step, self.recorders, scalars={name: float(total)})

    def drain(self) -> None:
        """Waits until every capture so far is written (re-raising a
        worker's error here, on the caller's thread)."""
        if self._worker is not None:
            self._worker.drain()

    def flush(self) -> None:
        """Flushes the hub's recorders."""
        self.hub.flush()

    def close(self) -> None:
        """Drains, writes what is fresh, then closes every recorder."""
        self.write()
        if self._worker is not None:
            self._worker.stop()
        if self._owns_hub:
            self.hub.close()
        else:
            self.flush()  # a shared hub: its owner closes it
