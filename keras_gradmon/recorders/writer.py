"""`MonitorWriter`: hands a monitor's fresh statistics to its recorders, once
each, from a worker thread; `write_summaries`, the one call a custom
training loop needs."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import Any

from keras_gradmon import distribute
from keras_gradmon.history import Cursor, Entry, latest_entry, unpack
from keras_gradmon.monitor import GradientMonitor
from keras_gradmon.recorders import claims
from keras_gradmon.recorders.base import Recorder
from keras_gradmon.recorders.buckets import histogram_rows
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from keras_gradmon.recorders.worker import Worker
from keras_gradmon.state import HistogramSnapshot, Snapshot
from keras_gradmon.tags import tag

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
    """Writes every summary a `GradientMonitor` recorded to `recorders`, once.

    `capture()` is what the training thread calls after a step that may
    have recorded: a few raw variable reads of the monitor's rings of
    recent summaries (`keras_gradmon.history`), no wait for the device.
    With `asynchronous=True` a worker thread then reads the numbers, builds
    the tags and writes every summary recorded since the last capture, in
    step order; its queue is bounded (`capture` waits when it is full:
    back-pressure, not memory), and it flushes the recorders whenever it
    runs dry, so everything captured lands in the files even if training
    stops with an exception. `close()` drains the queue, writes what is
    fresh and closes the recorders. Recorders marked `immediate` (Keras
    logs) get the newest summary at once, on the capturing thread.

    More summaries recorded between two captures than the state keeps
    (`summary_history`) are counted, written as `dropped/summaries` (and
    `dropped/histograms`), and reported once on the console.

    Under a multi-worker strategy only the chief writes (TensorFlow's
    `strategy.extended.should_save_summary`); the other workers read the
    same numbers (`latest`, for Keras logs) and write nothing.

    Args:
        monitor: The monitor (a wrapper's `.monitor`).
        recorders: Where to write.
        label: How errors name the monitored optimizer.
        asynchronous: Read back and write on a worker thread.
        queue_size: The most captures waiting for the worker.

    Example:

    >>> writer = MonitorWriter(  # doctest: +SKIP
    ...     optimizer.monitor, [TensorBoardRecorder("logs")])
    >>> writer.write()  # after a train step  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        monitor: GradientMonitor,
        recorders: Sequence[Recorder],
        label: str = "",
        asynchronous: bool = False,
        queue_size: int = 32,
    ) -> None:
        self.monitor = monitor
        self.recorders = list(recorders)
        self.immediate = [r for r in self.recorders if getattr(r, "immediate", False)]
        self.label = label or "optimizer"
        self.latest: Snapshot | None = None
        #: Whether the last look found no fresh summary where one was due (a
        #: skipped step delays it): the caller looks again after each step.
        self.missed = False
        self._claimed = False
        self._cursors: dict[str, Cursor] = {}
        self._warned = False
        self._worker = (
            Worker(self._process, self.flush, queue_size) if asynchronous else None
        )

    @property
    def writes(self) -> bool:
        """Whether this process writes (False on non-chief workers)."""
        return distribute.writes_summaries(self.monitor.state.scalars.count)

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
            self._write_immediate(item[0])
        if self._worker is None:
            self._process(item)
        else:
            self._worker.put(item)

    def _write_immediate(self, captured: tuple) -> None:
        entry = latest_entry(self.monitor.layout.history, *unpack(captured))
        if entry is None:
            return
        snapshot = self.monitor.scalar_values(entry.step, *entry.payloads)
        wanted = {t for r in self.immediate for t in getattr(r, "keys", {}).values()}
        values = self.monitor.tags.values_of(
            snapshot.values, snapshot.has_grad, wanted
        )
        for recorder in self.immediate:
            recorder.write_scalars(values, snapshot.step)

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

    def _write_scalars(self, snapshot: Snapshot) -> None:
        if self.writes:
            values = self.monitor.tags.scalar_values(snapshot.values, snapshot.has_grad)
            for recorder in self.recorders:
                if recorder not in self.immediate:
                    recorder.write_scalars(values, snapshot.step)
        self.latest = snapshot

    def _write_histograms(self, snapshot: HistogramSnapshot) -> None:
        if self.writes:
            values = histogram_values(self.monitor, snapshot)
            for recorder in self.recorders:
                recorder.write_histograms(values, snapshot.step)

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
            for recorder in self.recorders:
                recorder.write_scalars({name: float(total)}, step)

    def drain(self) -> None:
        """Waits until every capture so far is written (re-raising a
        worker's error here, on the caller's thread)."""
        if self._worker is not None:
            self._worker.drain()

    def flush(self) -> None:
        for recorder in self.recorders:
            recorder.flush()

    def close(self) -> None:
        """Drains, writes what is fresh, then closes every recorder."""
        self.write()
        if self._worker is not None:
            self._worker.stop()
        for recorder in self.recorders:
            recorder.close()


_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def write_summaries(optimizer: Any, writer: Any) -> bool:
    """Writes the statistics `optimizer` recorded since the last call.

    The one line a custom training loop needs after `apply_gradients`;
    what it writes is flushed to the event file at once.
    Statistics already written are not written again, so calling it every
    step costs two small host reads on steps without fresh statistics.

    Args:
        optimizer: A monitored optimizer (any adapter), or an optimizer
            wrapping one.
        writer: A `tf.summary` writer (`tf.summary.create_file_writer(...)`)
            or a log directory.

    Returns:
        Whether anything was written.

    Example:

    ```python
    writer = tf.summary.create_file_writer("logs/train")
    for x, y in dataset:
        train_step(x, y)  # calls optimizer.apply_gradients(...)
        keras_gradmon.write_summaries(optimizer, writer)
    ```
    """
    from keras_gradmon.adapters.base import find_monitored

    monitored = find_monitored(optimizer)
    per_optimizer = _writers.setdefault(monitored.monitor, {})
    key = writer if isinstance(writer, str) else id(writer)
    if key not in per_optimizer:
        recorder = (
            TensorBoardRecorder(log_dir=writer)
            if isinstance(writer, str)
            else TensorBoardRecorder(writer=writer)
        )
        label = monitored._monitor_name()
        per_optimizer[key] = MonitorWriter(monitored.monitor, [recorder], label)
    return per_optimizer[key].write()
