"""`Hub`: where every host-side monitor publishes its numbers, and the
`Recorder` protocol of what it writes to.

The gradient writer, the activation monitor, the RL health monitor and the
alert deliveries each publish a `Publication` (`{tag: value}` scalars,
`{tag: [k, 3]}` histograms, text, and the metrics alert rules read) at a
step. The hub writes it to each of its recorders (`recorders.base.Recorder`:
TensorBoard, Keras logs, JSON Lines, the console, your own) and hands it to
its listeners (the alert engines). A new recorder is one class: added to a
hub, it receives every monitor's numbers.

No TensorFlow and no Keras here: the hub only moves host numbers.

Example:

>>> from keras_gradmon.recorders.console import ConsoleRecorder
>>> hub = Hub([ConsoleRecorder(tags=".")])
>>> hub.publish(Publication(3, "rl", scalars={"rl/episode/return_mean": 9.5}))
step 3: rl/episode/return_mean=9.5
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Recorder(Protocol):
    """A destination for recorded numbers (TensorBoard, Keras logs, JSON
    Lines, the console). Recorders never compute statistics: they write
    what they are given, at the step they are given.

    `destination` names where the numbers land (a directory, a file, an
    object), so that two monitors writing the same tags to one place are
    refused; None where nothing can collide (the console).

    Example:

    >>> class Printer:
    ...     destination = None
    ...     def write_scalars(self, values, step): print(step, values)
    ...     def write_histograms(self, histograms, step): pass
    ...     def write_text(self, tag, lines, step): pass
    ...     def flush(self): pass
    ...     def close(self): pass
    >>> isinstance(Printer(), Recorder)
    True
    """

    destination: Any

    def write_scalars(self, values: Mapping[str, float], step: int) -> None:
        """Writes each `{tag: value}` at `step`."""
        ...

    def write_histograms(self, histograms: Mapping[str, np.ndarray], step: int) -> None:
        """Writes each `{tag: [k, 3] (left, right, count) rows}` at `step`."""
        ...

    def write_text(self, tag: str, lines: Sequence[str], step: int) -> None:
        """Writes `lines` as one text entry under `tag` at `step`."""
        ...

    # Optional: `write_table(table, step)`, a step's per-variable numbers as
    # one `keras_gradmon.columns.Table`. A recorder without it gets them as
    # scalars (`Table.scalars()`, the per-variable tags).
    # Optional: `write_alerts(batch, step)`, a step's alerts as one
    # `keras_gradmon.alerts.log.AlertBatch`. A recorder without it gets
    # them as text: one JSON object per alert (`AlertBatch.lines()`).

    def flush(self) -> None:
        """Makes everything written so far visible to readers."""
        ...

    def close(self) -> None:
        """Flushes and releases the destination (after training ends)."""
        ...


#: The sources of the built-in publishers.
GRADIENTS, ACTIVATIONS, RL, ALERTS = "gradients", "activations", "rl", "alerts"


@dataclasses.dataclass(frozen=True)
class Publication:
    """What one monitor measured at one step.

    Attributes:
        step: The training step the numbers describe.
        source: Which kind of monitor published it ("gradients",
            "activations", "rl", "alerts", or your own).
        scalars: `{tag: value}`.
        histograms: `{tag: [k, 3] (left, right, count) rows}`.
        texts: `{tag: lines}`, each written as one text entry.
        tables: Per-variable numbers (`keras_gradmon.columns.Table`), each
            written with the recorder's `write_table`, or as scalars.
        alerts: Alerts (`keras_gradmon.alerts.log.AlertBatch`), each
            written with the recorder's `write_alerts`, or as text.
        metrics: `{metric: {subject: value}}`, what alert rules read
            (`AlertEngine.update`); not written by recorders.
        origin: The publishing monitor: listeners subscribed to it get only
            its publications.
        record: Whether recorders write it (False: for listeners only, e.g.
            on the non-chief workers of a multi-worker strategy).
    """

    step: int
    source: str
    scalars: Mapping[str, float] = dataclasses.field(default_factory=dict)
    histograms: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    texts: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    tables: Sequence[Any] = ()
    alerts: Sequence[Any] = ()
    metrics: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    origin: Any = None
    record: bool = True


#: A listener: called with each publication it subscribed to.
Listener = Callable[[Publication], Any]


def check_recorders(recorders: Iterable[Recorder] | None) -> list[Recorder]:
    """`recorders` as a list, each checked against the `Recorder` protocol.

    Example:

    >>> check_recorders([42])
    Traceback (most recent call last):
    ...
    ValueError: `recorders` must hold objects with write_scalars, ...
    """
    if recorders is None:
        return []
    if isinstance(recorders, (str, bytes)) or not isinstance(recorders, Iterable):
        raise ValueError(
            "`recorders` must be a list of recorders (see "
            f"keras_gradmon.recorders). Received: recorders={recorders!r}"
        )
    recorders = list(recorders)
    for recorder in recorders:
        if not isinstance(recorder, Recorder):
            raise ValueError(
                "`recorders` must hold objects with write_scalars, "
                "write_histograms, write_text, flush, close and destination "
                f"(the Recorder protocol). Received: {recorder!r}"
            )
    return recorders


class Hub:
    """Feeds what monitors publish to recorders and listeners.

    Publishing is serialized (one lock): a gradient writer's worker thread
    and an activation monitor on the training thread may share a hub, and
    a recorder never sees two writes at once. Recorders get scalars, then
    histograms, texts, tables and alerts, skipping what is empty; listeners
    run after the recorders, in subscription order, and may publish again
    (an alert delivery writes its flags through the same hub). An error in
    a recorder or listener propagates to the publisher: nothing is dropped
    silently.

    Args:
        recorders: Where to write (`Recorder` objects).

    Example:

    >>> seen = []
    >>> hub = Hub()
    >>> hub.subscribe(lambda p: seen.append((p.source, p.step)))
    >>> hub.publish(Publication(5, "activations", scalars={"a": 1.0}))
    >>> seen
    [('activations', 5)]
    """

    def __init__(self, recorders: Iterable[Recorder] | None = None) -> None:
        self._recorders = check_recorders(recorders)
        self._listeners: list[tuple[Listener, Any]] = []
        self._lock = threading.RLock()

    @property
    def recorders(self) -> list[Recorder]:
        """The recorders, in the order they were added."""
        return list(self._recorders)

    def add(self, recorder: Recorder) -> Recorder:
        """Adds `recorder` (once) and returns it."""
        (recorder,) = check_recorders([recorder])
        with self._lock:
            if not any(r is recorder for r in self._recorders):
                self._recorders.append(recorder)
        return recorder

    def subscribe(self, listener: Listener, origin: Any = None) -> None:
        """Calls `listener(publication)` for each publication of `origin`
        (None: of every publisher)."""
        if not callable(listener):
            raise ValueError(
                f"`listener` must be callable. Received: listener={listener!r}"
            )
        with self._lock:
            self._listeners.append((listener, origin))

    def listens_to(self, origin: Any) -> bool:
        """Whether a listener takes the publications of `origin` (a
        publisher may then skip what only listeners read)."""
        return any(o is None or o is origin for _, o in self._listeners)

    def publish(
        self, publication: Publication, recorders: Sequence[Recorder] | None = None
    ) -> None:
        """Writes `publication` to the recorders (or to `recorders`, a subset
        of them), then hands it to its listeners."""
        with self._lock:
            self.write(publication, recorders)
            for listener, origin in list(self._listeners):
                if origin is None or origin is publication.origin:
                    listener(publication)

    def write(
        self, publication: Publication, recorders: Sequence[Recorder] | None = None
    ) -> None:
        """Writes `publication` to the recorders (or to `recorders`) only: for
        numbers the listeners get in another publication (the newest
        gradient norm that Keras logs show at once, say)."""
        if not publication.record:
            return
        with self._lock:
            for recorder in self._recorders if recorders is None else recorders:
                _write(recorder, publication)

    def flush(self) -> None:
        """Flushes every recorder."""
        with self._lock:
            for recorder in self._recorders:
                recorder.flush()

    def close(self) -> None:
        """Closes every recorder (a later write may reopen it)."""
        with self._lock:
            for recorder in self._recorders:
                recorder.close()


def check_hub(hub: Hub | None, log_dir: Any, writer: Any) -> None:
    """Checks that a monitor got at most one of `log_dir` and `writer`, and
    not them with a shared `hub` (whose recorders decide where numbers go).

    Example:

    >>> check_hub(Hub(), "logs", None)
    Traceback (most recent call last):
    ...
    ValueError: Pass `hub` or `log_dir` / `writer`, not both ...
    """
    if log_dir is not None and writer is not None:
        raise ValueError(
            "Pass at most one of `log_dir` and `writer`. Received: "
            f"log_dir={log_dir!r}, writer={writer!r}"
        )
    if hub is None:
        return
    if not isinstance(hub, Hub):
        raise ValueError(f"`hub` must be a Hub or None. Received: hub={hub!r}")
    if log_dir is not None or writer is not None:
        raise ValueError(
            "Pass `hub` or `log_dir` / `writer`, not both (add a "
            "TensorBoardRecorder to the hub instead). Received: "
            f"log_dir={log_dir!r}, writer={writer!r}"
        )


def chief_writes(variable: Any) -> bool:
    """Whether this process writes the summaries of a monitor holding
    `variable`: False only on the non-chief workers of a TensorFlow
    multi-worker strategy. TensorFlow is never imported here: where it is
    not imported yet, no TensorFlow strategy can hold `variable`.

    Example:

    >>> chief_writes(None)
    True
    """
    if variable is None or "tensorflow" not in sys.modules:
        return True
    from keras_gradmon.backend import distribute

    return distribute.writes_summaries(variable)


def _write(recorder: Recorder, publication: Publication) -> None:
    step = publication.step
    if publication.scalars:
        recorder.write_scalars(publication.scalars, step)
    if publication.histograms:
        recorder.write_histograms(publication.histograms, step)
    for name, lines in publication.texts.items():
        recorder.write_text(name, lines, step)
    for table in publication.tables:
        write_table = getattr(recorder, "write_table", None)
        if write_table is None:
            recorder.write_scalars(table.scalars(), step)
        else:
            write_table(table, step)
    for batch in publication.alerts:
        write_alerts = getattr(recorder, "write_alerts", None)
        if write_alerts is None:
            recorder.write_text(batch.text_tag, batch.lines(), step)
        else:
            write_alerts(batch, step)
