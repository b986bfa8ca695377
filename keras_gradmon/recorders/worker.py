"""`Worker`: one daemon thread that processes queued items in order, so that
reading back and writing happen off the training thread."""

from __future__ import annotations

import atexit
import contextlib
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

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
