"""Batch hooks that Keras may run off the training thread.

Keras dispatches `on_train_batch_end` to a worker thread when every callback
with batch hooks says it is `async_safe`; otherwise it waits for each step
to finish (to turn the logs into Python numbers) before dispatching the
next. On JAX that wait costs the overlap of one step's host work with the
previous step's compute: more than the monitor itself, on a small model.
The gradient callbacks say they are safe there: what they read is the
trainer's live state at the time they run (every row of the summary history
since their last look, none lost), one call at a time.

Example:

>>> class MyCallback(AsyncOnJax, keras.callbacks.Callback):  # doctest: +SKIP
...     @serialized
...     def on_train_batch_end(self, batch, logs=None): ...
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import keras


class AsyncOnJax:
    """`async_safe` on the JAX backend (Keras then runs the batch hooks on a
    worker thread); on TensorFlow Keras keeps calling them in line."""

    @property
    def async_safe(self) -> bool:
        return keras.backend.backend() == "jax"


def serialized(hook: Callable[..., Any]) -> Callable[..., Any]:
    """`hook`, one call at a time per callback (Keras's worker pool may run
    two batches' hooks at once)."""

    @functools.wraps(hook)
    def one_at_a_time(self: Any, *args: Any, **kwargs: Any) -> Any:
        lock = self.__dict__.setdefault("_hook_lock", threading.RLock())
        with lock:
            return hook(self, *args, **kwargs)

    return one_at_a_time


class Deferral:
    """Where a callback reads the device for a batch: at the batch's end
    when Keras calls the hook on the training thread; when it calls it on a
    worker thread, at the start of the next batch (or the epoch's end), back
    on the training thread: JAX's trainer donates its state to the next
    step, and reading it from another thread while that step starts can
    make the step fail.

    Example:

    >>> deferral = Deferral()
    >>> deferral.start()
    >>> deferral.at_end(4), deferral.take()   # on the training thread
    (True, None)
    """

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.pending: int | None = None

    def start(self) -> None:
        """Called on the training thread when training starts."""
        self.thread = threading.current_thread()
        self.pending = None

    def at_end(self, batch: int) -> bool:
        """Whether to read now, at the end of `batch` (else it is pending)."""
        if threading.current_thread() is self.thread:
            return True
        self.pending = batch if self.pending is None else max(self.pending, batch)
        return False

    def take(self) -> int | None:
        """The last batch whose reads were put off, if any (then cleared)."""
        pending, self.pending = self.pending, None
        return pending


class BatchReads(AsyncOnJax):
    """Batch hooks that read the device on the training thread, whichever
    thread Keras calls them on (`Deferral`). A subclass defines
    `_read_batch(batch)` (the reads for the steps up to the end of `batch`)
    and `_batch_logs(logs)` (what it puts into the batch's logs), and calls
    `self._deferral.start()` when training starts.

    Example:

    >>> class Reads(BatchReads, keras.callbacks.Callback):  # doctest: +SKIP
    ...     def _read_batch(self, batch): ...
    ...     def _batch_logs(self, logs): ...
    """

    @property
    def _deferral(self) -> Deferral:
        return self.__dict__.setdefault("_batch_deferral", Deferral())

    @serialized
    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        pending = self._deferral.take()
        if pending is not None:
            self._read_batch(pending)

    @serialized
    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self._deferral.at_end(batch):
            self._read_batch(batch)
        self._batch_logs(logs)

    def _read_batch(self, batch: int) -> None:
        raise NotImplementedError

    def _batch_logs(self, logs: dict | None) -> None:
        raise NotImplementedError
