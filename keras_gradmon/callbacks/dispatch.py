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
    """Where a callback reads the device for a batch. Keras calls the batch
    hooks on the training thread, or, for `async_safe` callbacks, the end
    hooks on a worker thread: there a read of JAX's state could race the
    next step, which donates it (and can then fail). So each batch's reads
    happen on the training thread: at the batch's end when the hook runs
    there, and in any case at the next batch's start (or the epoch's end)
    for the batch before, which the end hook's own read, if it ran, leaves
    with nothing new to read. Reads never wait for the worker.

    Example:

    >>> deferral = Deferral()
    >>> deferral.start(at_begin=True)
    >>> deferral.at_end(4), deferral.last   # on the training thread
    (True, 4)
    """

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.at_begin = False
        self.last: int | None = None

    def start(self, at_begin: bool) -> None:
        """Called on the training thread when training starts; `at_begin`:
        read the previous batch at each batch's start too."""
        self.thread = threading.current_thread()
        self.at_begin = at_begin
        self.last = None

    def at_end(self, batch: int) -> bool:
        """Whether to read now, at the end of `batch` (on the training
        thread)."""
        self.last = batch if self.last is None else max(self.last, batch)
        return threading.current_thread() is self.thread

    def before(self, batch: int) -> int | None:
        """The batch to read at the start of `batch`: the one before, where
        reads are made at batch starts."""
        return batch - 1 if self.at_begin and batch > 0 else None


class BatchReads(AsyncOnJax):
    """Batch hooks that read the device on the training thread, whichever
    thread Keras calls them on (`Deferral`). A subclass defines
    `_read_batch(batch)` (the reads for the steps up to the end of `batch`:
    asked twice for a batch, the second finds nothing new) and
    `_batch_logs(logs)` (what it puts into the batch's logs), calls
    `self._start_reads()` when training starts and `self._read_last()` at
    the epoch's end.

    Example:

    >>> class Reads(BatchReads, keras.callbacks.Callback):  # doctest: +SKIP
    ...     def _read_batch(self, batch): ...
    ...     def _batch_logs(self, logs): ...
    """

    @property
    def _deferral(self) -> Deferral:
        return self.__dict__.setdefault("_batch_deferral", Deferral())

    def _start_reads(self) -> None:
        self._deferral.start(at_begin=self.async_safe)

    def _read_last(self) -> None:
        """Reads for the epoch's last batch (on the training thread)."""
        if self._deferral.last is not None:
            self._read_batch(self._deferral.last)

    @serialized
    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        previous = self._deferral.before(batch)
        if previous is not None:
            self._read_batch(previous)

    @serialized
    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self._deferral.at_end(batch):
            self._read_batch(batch)
        self._batch_logs(logs)

    def _read_batch(self, batch: int) -> None:
        raise NotImplementedError

    def _batch_logs(self, logs: dict | None) -> None:
        raise NotImplementedError
