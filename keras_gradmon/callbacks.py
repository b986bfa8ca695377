"""The Keras callbacks: `GradientMonitorCallback` (a monitored optimizer's
summaries and alerts during `fit`) and `ActivationMonitorCallback` (the
layers' activations on a probe batch), with what they share: the optimizer
steps `fit`'s batches covered, counted on the host (`StepTracker`), and the
batch hooks that Keras may run off the training thread (`BatchReads`). The
deprecated `GradientSummaryCallback` and `GradientAlertCallback` are
`GradientMonitorCallback` without alerts, and with its alerts alone.

Keras dispatches `on_train_batch_end` to a worker thread when every callback
with batch hooks says it is `async_safe`; otherwise it waits for each step
to finish (to turn the logs into Python numbers) before dispatching the
next. On JAX that wait costs the overlap of one step's host work with the
previous step's compute: more than the monitor itself, on a small model.
The gradient callbacks say they are safe there: what they read is the
trainer's live state at the time they run (every row of the summary history
since their last look, none lost), one call at a time, on the training
thread (`Deferral`).

Example:

```python
model.fit(x, y, callbacks=[
    keras_gradmon.GradientMonitorCallback("logs/train"),
    keras_gradmon.ActivationMonitorCallback(x_val[:256], log_dir="logs/train"),
])
```
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import numpy as np

from keras_gradmon import validation
from keras_gradmon.activations.monitor import (
    ActivationMonitor,
    ActivationOptions,
    activation_options,
)
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.delivery import Action, AlertChecker, AlertOptions
from keras_gradmon.alerts.events import Alert
from keras_gradmon.alerts.incidents import DEFAULT_FOLD_STEPS
from keras_gradmon.columns import GLOBAL, tag
from keras_gradmon.hub import Hub, Recorder, check_hub, check_recorders
from keras_gradmon.programs import Programs, build_before_tracing
from keras_gradmon.recorders.console import progress_safe_logging
from keras_gradmon.recorders.keras_logs import KerasLogsRecorder, LogValue
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder, recording_hub
from keras_gradmon.wrapping import MonitoredOptimizer, find_monitored
from keras_gradmon.writer import MonitorWriter


def optimizer_step(optimizer: Any) -> int:
    """The optimizer's iteration count, as a Python int (one host read; from
    the trainer's live state on JAX, where `fit` keeps it)."""
    read = getattr(optimizer, "read_iterations", None)
    if read is not None:
        return read()
    return int(optimizer.iterations.numpy())


def live_optimizer_step(optimizer: Any, model: Any) -> int:
    """`optimizer_step` of `model`'s optimizer, read where the count lives:
    during a JAX `fit` (its variable purged until the epoch ends) in the
    trainer's `model._jax_state["optimizer_variables"]`, at the place of
    `optimizer.iterations` in `optimizer.variables`; elsewhere as
    `optimizer_step` reads it.

    Example:

    >>> live_optimizer_step(model.optimizer, model)  # doctest: +SKIP
    120
    """
    count = _trainer_count(optimizer, model)
    return optimizer_step(optimizer) if count is None else count


def _trainer_count(optimizer: Any, model: Any) -> int | None:
    """The iteration count in the JAX trainer's live state, None when the
    trainer holds none ahead of the variables."""
    from keras_gradmon.backend import trainer_values

    values = trainer_values(model, "optimizer_variables")
    places = [id(v) for v in getattr(optimizer, "variables", ())]
    iterations = id(optimizer.iterations)
    if not values or iterations not in places:
        return None
    return int(np.asarray(values[places.index(iterations)]))


def monitored_optimizer(
    callback: str, optimizer: Any, model: Any
) -> MonitoredOptimizer:
    """The monitored optimizer a callback reads: `optimizer`, else the
    model's, with an error that says what to do when the model's optimizer
    is not monitored (a custom `train_step` that applies a wrapper kept
    outside `compile`: Keras then made an optimizer of its own).

    Example:

    >>> monitored_optimizer("GradientSummaryCallback", None, model)  # doctest: +SKIP
    """
    if optimizer is not None:
        return _bound(find_monitored(optimizer), model)
    found = getattr(model, "optimizer", None)
    try:
        return _bound(find_monitored(found), model)
    except ValueError as error:
        raise ValueError(
            f"{callback} reads the model's optimizer, {found!r}, which "
            "keras_gradmon does not monitor. If your `train_step` applies a "
            "monitored optimizer that was not passed to `compile` (Keras "
            "then makes an optimizer of its own), pass it to the callback: "
            f"{callback}(..., optimizer=my_monitored_optimizer). ({error})"
        ) from None


def _bound(monitored: MonitoredOptimizer, model: Any) -> MonitoredOptimizer:
    """`monitored`, told to read its live state from `model`'s trainer (JAX
    keeps it outside the variables during `fit`)."""
    bind = getattr(monitored, "bind_model", None)
    if bind is not None and model is not None:
        bind(model)
    return monitored


class StepTracker:
    """Maps `fit`'s batch indices to optimizer steps, without device reads.

    At each epoch start it takes the optimizer's iteration count (one host
    read an epoch); at the end of the epoch's first batch, with `read`
    given, it reads the count once more to learn how many optimizer steps
    a batch takes (a `train_step` may apply the optimizer several times: a
    WGAN's critic steps), with `once` only until it has learnt it: a
    tracker serves one `fit`, whose train function is the same in every
    epoch. Batches are then counted from it, several steps per batch with
    `steps_per_execution`. A step skipped for non-finite gradients does not
    advance the optimizer's count, so within an epoch the host count can
    run ahead by the skips (callers that must not miss a summary look
    again until they find it).

    Args:
        read: Reads the optimizer's iteration count, or None to take one
            step per batch.
        once: Whether one measurement holds for every epoch (the optimizer
            counts every step: none skipped, so a batch's steps are all
            counted); else each epoch measures again.

    Example:

    >>> tracker = StepTracker()
    >>> tracker.start_epoch(iterations=100)
    >>> tracker.batch_start(0), tracker.batch_end(0), tracker.batch_end(3)
    (100, (100, 101), (101, 104))
    >>> tracker = StepTracker(read=lambda: 103)   # 3 steps in the first batch
    >>> tracker.start_epoch(iterations=100)
    >>> tracker.batch_end(0), tracker.batch_end(1)
    ((100, 103), (103, 106))
    """

    def __init__(
        self, read: Callable[[], int] | None = None, once: bool = False
    ) -> None:
        self.read = read
        self.once = once
        self.epoch_first = 0
        self.done = 0
        #: Optimizer steps per batch (1 until measured).
        self.per_batch = 1.0
        #: Whether `per_batch` was measured (by `read`).
        self.measured = False

    def start_epoch(self, iterations: int) -> None:
        self.epoch_first = int(iterations)
        self.done = 0

    def batch_start(self, batch: int) -> int:
        """The step the batch with index `batch` starts at."""
        return self.epoch_first + self._steps(batch)

    def batch_end(self, batch: int) -> tuple[int, int]:
        """`[first, end)`: the steps run since the previous `batch_end`."""
        if self.done == 0 and self.read is not None and not self.measured:
            taken = int(self.read()) - self.epoch_first
            if taken > 0:
                self.per_batch = taken / (batch + 1)
                self.measured = self.once
        first = self.epoch_first + self._steps(self.done)
        self.done = max(self.done, batch + 1)
        return first, self.epoch_first + self._steps(self.done)

    def _steps(self, batches: int) -> int:
        return round(self.per_batch * batches)


class ActivationMonitorCallback(keras.callbacks.Callback):
    """Records the activations of a model's layers during `fit`.

    Before the train steps 0, N, 2N, ... it runs the model once on the probe
    batch `data` (inference mode), and writes per watched layer the mean,
    std, min, max, fraction of zeros, dead-unit fraction, saturation (tanh,
    sigmoid) and a histogram under `activation_<stat>/<layer>` and
    `activation_hist/<layer>`. The step is the optimizer's iteration count,
    so activations and gradients of one step sit side by side in
    TensorBoard: both describe the weights that step started from. Other
    batches cost nothing: the callback counts them without touching the
    device. Std outside the healthy band and dead units raise alerts (see
    `ActivationMonitor`). On Keras 3's JAX backend the probe and the step
    are read from the trainer's live state (`model._jax_state`), where
    `fit` keeps the weights until the epoch ends.

    Args:
        data: The probe batch of model inputs (a few hundred held-out
            samples: the window over which a unit must stay at zero to
            count as dead).
        config: An `ActivationOptions`, a dict of its fields, or a config
            file's path (its `activations` section).
        alerts: An `AlertOptions` (or a dict of its fields); False for no
            activation alerts.
        model: The model, when known before `fit` (checks `layers` now;
            unknown names are an error listing the model's layers, else
            when `fit` starts).
        hub: Publish to this `keras_gradmon.hub.Hub` (shared with the
            gradient and RL monitors) instead of one of its own.
        **options: Options (`ActivationOptions` fields) one by one, as
            for `ActivationMonitor`: `log_dir` / `writer`, `layers`,
            `every_n_steps`, `histogram_buckets`, `std_band`,
            `dead_fraction`, `tag_scope`.

    Example:

    ```python
    model.fit(x, y, callbacks=[keras_gradmon.ActivationMonitorCallback(
        x_val[:256], log_dir="logs/activations", every_n_steps=100)])
    ```
    """

    def __init__(
        self,
        data: Any = None,
        /,
        *,
        config: ActivationOptions | Mapping[str, Any] | str | None = None,
        alerts: AlertOptions | Mapping[str, Any] | bool | None = None,
        model: Any = None,
        hub: Hub | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        # Everything that can be checked without the model, checked now.
        name = type(self).__name__
        self._options = activation_options(name, data, config, alerts, **options)
        check_hub(hub, self._options.log_dir, self._options.writer)
        self._hub = hub
        self.monitor: ActivationMonitor | None = None
        self._steps = StepTracker()
        self._previous: int | None = None
        self._console: contextlib.ExitStack | None = None
        if model is not None:
            self.set_model(model)

    @property
    def alerts(self) -> list[Alert]:
        """Every activation alert emitted so far, in order."""
        return self.monitor.alerts if self.monitor else []

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        if self.monitor is None or self._monitored_model is not model:
            self.monitor = ActivationMonitor(model, config=self._options, hub=self._hub)
            self._monitored_model = model

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._previous = None
        self._console = progress_safe_console(self)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        # One host read an epoch (exact even after skipped steps); batches
        # are then counted from it, with no device access.
        optimizer = getattr(self.model, "optimizer", None)
        has_step = getattr(optimizer, "iterations", None) is not None
        step = live_optimizer_step(optimizer, self.model) if has_step else 0
        self._steps.start_epoch(step)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        step = self._steps.batch_start(batch)
        # With `steps_per_execution` a batch covers several steps: a due
        # step inside the previous one is measured at this batch's start.
        first = step if self._previous is None else self._previous + 1
        latest = self.monitor.latest
        fresh = latest is None or latest.step != step
        if fresh and self.monitor.schedule.any_due(first, step + 1):
            self.monitor.record(step)
            if self.monitor.stop_requested:
                self.model.stop_training = True
        self._previous = step

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._console is not None:
            self._console.close()
        self.monitor.close()


def progress_safe_console(callback: Any) -> contextlib.ExitStack | None:
    """Puts the alerts' log lines on lines of their own while `fit` draws
    Keras's progress bar (verbose=1), where nobody configured logging (the
    lines would start in the middle of the bar); None elsewhere. Close what
    it returns when training ends.

    Example:

    >>> progress_safe_console(callback)  # doctest: +SKIP
    """
    if getattr(callback, "params", {}).get("verbose") != 1:
        return None
    if logging.getLogger("keras_gradmon").handlers or logging.getLogger().handlers:
        return None
    stack = contextlib.ExitStack()
    stack.enter_context(progress_safe_logging())
    return stack


def _missed(found: bool, before: int, after: int) -> bool:
    """Whether a look for a due summary missed it: it found nothing new
    (`found`), and the rules' last summary is still the one of step
    `before` (`after`: another reader of the same writer may have
    published it first). A look that found only histograms found
    something."""
    return not found and after == before


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
        with hook_lock(self):
            return hook(self, *args, **kwargs)

    return one_at_a_time


def hook_lock(callback: Any) -> threading.RLock:
    """The lock that `serialized` hooks of `callback` hold."""
    return callback.__dict__.setdefault("_hook_lock", threading.RLock())


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

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        # Not `serialized`: a batch with nothing to read must not wait for
        # the worker's end hook of the batch before (on JAX that wait is
        # the step's whole overlap with the host); `_read_batch` holds the
        # lock where it reads.
        previous = self._deferral.before(batch)
        if previous is not None:
            self._read_batch(previous)

    @serialized
    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self._deferral.at_end(batch):
            self._read_batch(batch)
        self._batch_logs(logs)

    def _read_batch(self, batch: int) -> None:
        """Reads for the steps up to the end of `batch`, on the training
        thread, holding `hook_lock(self)` while it reads."""
        raise NotImplementedError

    def _batch_logs(self, logs: dict | None) -> None:
        raise NotImplementedError


class GradientMonitorCallback(BatchReads, keras.callbacks.Callback):
    """The host side of a monitored optimizer during `fit`: its summaries to
    TensorBoard and Keras logs, and its alerts.

    Scalars and histograms go to TensorBoard at `log_dir` (and to any extra
    `recorders`) at the optimizer's configured frequencies, with the
    optimizer's step; the global gradient norm also goes into Keras `logs`
    under `logs_key` (progress bar, `History`, `CSVLogger`). The alert rules
    (`alerts`) see every summary once; each alert is an entry of `alerts`,
    an `alerts/<rule>` flag and an `alert_log` text beside the numbers, and
    a log line grouped into incidents (logger "keras_gradmon"); its tier's
    action runs ("stop" ends `fit` after the batch; on JAX up to two
    batches later, see below). On steps without a
    summary due the callback reads nothing from the device. The monitor's
    writer (`keras_gradmon.writer.MonitorWriter`) is the one reader of what
    the optimizer recorded; without alerts it reads back and writes on a
    worker thread, with them on the training thread, so that an action
    acts on the batch that fired it (on JAX up to two batches later: the
    reads happen at the next batch's start there where Keras runs the end
    hooks on a worker thread, and the rules wait for a step only once the
    next one runs).

    Args:
        log_dir: Directory for the event file (created lazily). Use a
            directory of its own, or Keras's `<log_dir>/train` to put the
            gradients beside the `TensorBoard` callback's loss curves.
        alerts: The alert rules and actions: an `AlertOptions` (or a dict
            of its fields); True for the defaults
            (`keras_gradmon.alerts.default_rules()`: non-finite gradients,
            growth, spikes, clipping most steps, update ratio out of band);
            False for none.
        optimizer: The monitored optimizer; defaults to `model.optimizer`.
        writer: An existing `tf.summary` writer, instead of `log_dir`.
        hub: A `keras_gradmon.hub.Hub` shared with other monitors
            (activations, RL health), instead of `log_dir` / `writer`.
        logs_key: The Keras logs key of the global gradient norm, or None.
        recorders: More destinations (`keras_gradmon.recorders`: JSON
            Lines, console, or your own `Recorder`).
        read_every: The fewest steps between two reads of the summaries
            (8; at most half the optimizer's `summary_history`). A summary
            due sooner after the last read waits, with those after it, for
            the first batch that ends this many steps after that read (or
            the epoch's end, or the interpreter's exit after a run that
            raised), and the event files, the Keras logs and the alert
            rules get them then, each with its own step: the logs' norm
            lags by up to that many steps. Where an alert can act (a
            "stop", "raise" or callable action), every read is made at
            once. A read costs the host about as much as publishing
            several summaries: with a summary every step, the callback's
            thread CPU a step on the benchmark MLP is about 200 us reading
            every 8 steps, against 400 (JAX) and 850 (TensorFlow) reading
            after each (docs/benchmarks.md). 1: read after every batch with
            a summary due. Summaries further apart than this are read as
            soon as they are due.

    Example:

    ```python
    model.compile(optimizer=keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(), every_n_steps=10), loss="mse")
    model.fit(x, y, callbacks=[keras_gradmon.GradientMonitorCallback(
        "logs/grads", alerts={"actions": {"critical": "stop"}})])
    ```
    """

    #: Whether the statistics themselves go to the hub (the deprecated
    #: `GradientAlertCallback` writes only its alerts).
    _records_numbers = True

    def __init__(
        self,
        log_dir: str | os.PathLike | None = None,
        *,
        alerts: AlertOptions | Mapping[str, Any] | bool = True,
        optimizer: Any = None,
        writer: Any = None,
        hub: Hub | None = None,
        logs_key: str | None = "grad_norm",
        recorders: Sequence[Recorder] | None = None,
        read_every: int = 8,
    ) -> None:
        super().__init__()
        # Every argument is checked now, not when `fit` starts.
        check_hub(hub, log_dir, writer)
        self.read_every = validation.positive_int("read_every", read_every)
        self._owns_hub = hub is None
        self.hub = recording_hub(log_dir, writer, hub)
        for recorder in check_recorders(recorders):
            self.hub.add(recorder)
        if logs_key is not None and not (isinstance(logs_key, str) and logs_key):
            raise ValueError(
                "`logs_key` must be a non-empty string or None. "
                f"Received: logs_key={logs_key!r}"
            )
        self.logs_key = logs_key
        options = AlertOptions.of(alerts)
        self._alerting = None
        if options is not None:
            self._alerting = (options.engine(), options.delivery(self.hub))
        self._optimizer = optimizer
        self._logs = KerasLogsRecorder({})
        self._writer: MonitorWriter | None = None
        self.checker: AlertChecker | None = None
        self._steps = StepTracker()
        self._fresh_fit = False
        self._pending = False
        #: JAX: what the last read took, for the rules (`_check_held`).
        self._held: tuple | None = None
        self._console: contextlib.ExitStack | None = None
        self._programs: Programs | None = None
        self._per_call = 1
        #: Steps before this one need nothing from the callback, as far as
        #: its reads have looked (`_quiet`); -1 where it has not looked yet.
        self._quiet_end: float = -1
        #: The step the last read looked up to (`read_every`), and whether
        #: summaries due since wait for a later read (`_set_waiting`).
        self._read_end: float = float("-inf")
        self._waiting = False

    @property
    def alerts(self) -> list[Alert]:
        """Every alert emitted so far, in order (empty without alerts)."""
        return [] if self._alerting is None else self._alerting[0].history

    @property
    def monitor_writer(self) -> MonitorWriter:
        """The writer of the monitored optimizer (found when training starts)."""
        if self._writer is None:
            monitored = self._monitored()
            self._writer = MonitorWriter.of(
                monitored.monitor, monitored._monitor_name()
            )
            if self._records_numbers:
                self.hub.add(self._logs)
                self._writer.link(self.hub)
            if self._alerting is not None:
                self.checker = AlertChecker.from_parts(monitored, *self._alerting)
        return self._writer

    def _monitored(self) -> MonitoredOptimizer:
        return monitored_optimizer(
            type(self).__name__, self._optimizer, getattr(self, "model", None)
        )

    def on_train_begin(self, logs: dict | None = None) -> None:
        writer = self.monitor_writer  # resolves the optimizer now
        if self._records_numbers:
            writer.link(self.hub)
        if self.checker is not None:
            writer.link(self.checker.listening)
        self._pending = False
        self._held = None
        monitored = self._monitored()
        self._steps = StepTracker(
            read=lambda: optimizer_step(monitored),
            once=bool(getattr(monitored, "counts_every_step", False)),
        )
        self._fresh_fit = True
        self._console = progress_safe_console(self)
        model = self.model  # on JAX, each `self.model` syncs the trainer's state
        build_before_tracing(model, monitored)
        self._programs = Programs.for_fit(model, monitored)
        self._per_call = int(getattr(model, "steps_per_execution", 1) or 1)
        self._start_reads()

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        # The host's count starts again from the optimizer's here (a last
        # call of `steps_per_execution` batches may have run fewer).
        step = optimizer_step(self._monitored())
        if self._fresh_fit and step > 0:
            # After every `on_train_begin` (`BackupAndRestore` restores there):
            # what a restored state holds was written by the run that made it.
            self.monitor_writer.skip_recorded()
        self._fresh_fit = False
        self._steps.start_epoch(step)
        self._quiet_end = -1
        self._read_end = float("-inf")  # the epoch's first due summary: at once

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self._held is not None:
            self._check_held()
        if self._quiet(batch + self._per_call):
            # Nothing is due in this call, nor left to read before it.
            if self._programs is not None:
                self._programs.plan(False)
            return
        super().on_train_batch_begin(batch, logs)  # reads the last batch first
        if self._programs is not None:
            self._programs.plan(*self._plan(batch))

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self._quiet(batch + 1) and not self._writer.immediate_pending:
            self._update_logs(logs)  # the newest values, as every batch
            return
        super().on_train_batch_end(batch, logs)

    def _quiet(self, batches_end: int) -> bool:
        """Whether the steps of the batches before `batches_end` need
        nothing: none due beyond what the reads looked at, none pending or
        missed. Most batches stop here, at a few comparisons (what a batch
        with nothing due costs on the host is the defaults' cost)."""
        writer = self._writer
        return (
            self._steps.done > 0  # the epoch's steps per batch are known
            and self._steps.batch_start(batches_end) <= self._quiet_end
            and not self._pending
            and not self._waiting
            and writer is not None
            and not writer.missed
        )

    def _plan(self, batch: int) -> tuple[bool, bool]:
        """Whether a step of the call that starts at `batch` can be due (the
        first call of an epoch before the steps a batch takes are measured
        always: it tells them), and whether the host knows it is: one step,
        its statistics due, its histograms not (`Programs.plan`)."""
        first_call = batch == 0 and not self._steps.measured
        if first_call or self.monitor_writer.missed or self._pending:
            return True, False
        first = self._steps.batch_start(batch)
        end = self._steps.batch_start(batch + self._per_call)
        monitor = self.monitor_writer.monitor
        scalars = monitor.schedule.any_due(first, end)
        histograms = monitor.histogram_schedule.any_due(first, end)
        one_step = end - first == 1 and self._steps.per_batch == 1
        return scalars or histograms, scalars and not histograms and one_step

    def _batch_logs(self, logs: dict | None) -> None:
        self.monitor_writer.write_immediate()
        self._update_logs(logs)

    def _read_batch(self, batch: int) -> None:
        """Reads what the steps up to the end of `batch` recorded, if a
        summary can be among them: at once where alerts may act on it, else
        on the writer's thread."""
        first, end = self._steps.batch_end(batch)
        writer = self.monitor_writer
        monitor = writer.monitor
        scalars = monitor.schedule.any_due(first, end)
        histograms = monitor.histogram_schedule.any_due(first, end)
        # After a look that found nothing (a skipped step delayed the
        # summary): look after every step until it shows up.
        missed = writer.missed or self._pending
        if (scalars or self._waiting) and not (histograms or missed):
            if self._waits(end):  # read with a later batch (`read_every`)
                self._set_waiting(True)
                return
            scalars = True
        if self._waiting:
            self._set_waiting(False)
        if scalars or histograms or missed:
            self._read_end = end
            with hook_lock(self):
                self._read(scalars or missed, histograms or missed)
        if not missed:  # the steps before `end` are read: quiet until due
            due = min(
                monitor.schedule.next_due(end), monitor.histogram_schedule.next_due(end)
            )
            self._quiet_end = max(self._quiet_end, due)

    def _waits(self, end: int) -> bool:
        """Whether the summaries due before step `end` wait for a later read:
        the last read looked up to fewer than `read_every` steps before
        (at most half the ring: a read then finds every summary since), and
        no alert can act (an action must act on time). The epoch's end
        publishes whatever waits (`on_epoch_end`)."""
        if self._alerting is not None and self._alerting[1].acts:
            return False
        history = self.monitor_writer.monitor.layout.history
        every = min(self.read_every, max(1, history // 2))
        return end - self._read_end < every

    def _set_waiting(self, waiting: bool) -> None:
        """Whether summaries wait for a later read; the writer publishes
        those still waiting at interpreter exit (a `fit` that raised)."""
        self._waiting = waiting
        self.monitor_writer.mark_waiting(waiting)

    def _read(self, scalars: bool, histograms: bool) -> None:
        writer = self.monitor_writer
        writer.claim()  # the tag scope is known from here on
        self._resolve_logs_keys()
        if self.checker is None:
            writer.capture(scalars, histograms)
            return
        if self.async_safe:
            self._check_behind(scalars, histograms)
        else:
            before = self.checker.checked_step
            self.checker.check()
            self._pending = _missed(
                self.checker.found, before, self.checker.checked_step
            )
        self._stop_if_asked()

    def _check_behind(self, scalars: bool, histograms: bool) -> None:
        """JAX: takes what the steps up to now recorded, for the rules to
        check at the next batch's start (`_check_held`)."""
        if self._held is not None:  # two reads in one batch: the older first
            self._check_held()
        self._held = self.monitor_writer.take(scalars, histograms)

    def _check_held(self) -> None:
        """JAX: runs the rules on what the last read took, a batch after it.
        Waiting for a read's own steps would leave the device idle while the
        host prepares the next step (on a GPU, every step measured took 2.3x
        a plain one's time); a batch later they are done, or nearly, while
        the newest step runs. An action therefore acts later than on
        TensorFlow (two batches after the step, where the reads happen at a
        batch's start); the alerts' steps are the summaries' own either
        way."""
        held, self._held = self._held, None
        writer, before = self.monitor_writer, self.checker.checked_step
        with hook_lock(self):
            fresh = writer.publish_taken(held)
        if writer.latest is not None:
            self.checker.checked_step = writer.latest.step
        self._pending = _missed(fresh, before, self.checker.checked_step)
        self._stop_if_asked()

    def _stop_if_asked(self) -> None:
        """Ends `fit` after this batch where an alert's action asked to."""
        if self.checker.stop_requested:
            self.model.stop_training = True

    def _resolve_logs_keys(self) -> None:
        """Keys the Keras logs to the global norm's tag, once the monitor's
        tag scope is known (it may be derived when the writer claims)."""
        if self.logs_key and not self._logs.keys:
            scope = self.monitor_writer.monitor.tags.scope
            self._logs.keys = {self.logs_key: tag("grad_norm", GLOBAL, scope)}

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._read_last()
        writer = self.monitor_writer
        if self._held is not None:  # `check` waits for the same steps
            self._check_held()
        if self.checker is not None:
            self.checker.check()
            self._stop_if_asked()
        writer.write()  # what is queued first, then what is fresh (or waits)
        self._set_waiting(False)
        writer.flush()
        writer.write_immediate()
        self._update_logs(logs)

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._console is not None:
            self._console.close()
        Programs.uninstall(self.model)
        writer = self.monitor_writer
        writer.close()
        writer.unlink(self.hub)
        if self.checker is not None:
            self.checker.close()  # closes the hub where it is this callback's
        elif self._owns_hub:
            self.hub.close()
        else:
            self.hub.flush()

    def _update_logs(self, logs: dict | None) -> None:
        self._logs.update(logs)
        if logs is not None and self.checker is not None:
            logs["grad_alerts"] = LogValue(len(self.alerts))


def _deprecated(old: str, new: str) -> None:
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release; use "
        f"{new} instead.",
        DeprecationWarning,
        stacklevel=3,
    )


class GradientSummaryCallback(GradientMonitorCallback):
    """Deprecated: `GradientMonitorCallback(log_dir, alerts=False)`, or
    `keras_gradmon.watch(model, log_dir)`. Writes what a monitored optimizer
    recorded, during `fit`, without alerts.

    Example:

    >>> GradientSummaryCallback("logs")  # doctest: +SKIP
    DeprecationWarning: GradientSummaryCallback is deprecated ...
    """

    def __init__(
        self,
        log_dir: str | os.PathLike | None = None,
        writer: Any = None,
        optimizer: Any = None,
        logs_key: str | None = "grad_norm",
        recorders: Sequence[Recorder] | None = None,
        hub: Hub | None = None,
    ) -> None:
        _deprecated(
            "GradientSummaryCallback", "GradientMonitorCallback(log_dir, alerts=False)"
        )
        if hub is None and log_dir is None and writer is None:
            TensorBoardRecorder(log_dir, writer)  # it needs one: says so
        super().__init__(
            log_dir,
            alerts=False,
            optimizer=optimizer,
            writer=writer,
            hub=hub,
            logs_key=logs_key,
            recorders=recorders,
            read_every=1,  # as it always read
        )


class GradientAlertCallback(GradientMonitorCallback):
    """Deprecated: `GradientMonitorCallback(log_dir, alerts=AlertOptions(...))`,
    which writes the alerts beside the statistics. Runs the alert rules on
    each fresh summary of a monitored optimizer during `fit`, writing only
    the `alerts/<rule>` flags and alert texts to `log_dir` / `writer` /
    `hub`; the options are those of `AlertOptions`.

    Example:

    >>> GradientAlertCallback(actions={"critical": "stop"})  # doctest: +SKIP
    DeprecationWarning: GradientAlertCallback is deprecated ...
    """

    _records_numbers = False

    def __init__(
        self,
        rules: Mapping[str, Rule] | Sequence[Rule] | None = None,
        actions: Mapping[str, Action] | None = None,
        optimizer: Any = None,
        log_dir: str | None = None,
        writer: Any = None,
        jsonl_path: str | None = None,
        cooldown_steps: int = 0,
        max_per_rule: int | None = None,
        hub: Hub | None = None,
        fold_steps: int | None = DEFAULT_FOLD_STEPS,
    ) -> None:
        _deprecated(
            "GradientAlertCallback", "GradientMonitorCallback(alerts=AlertOptions(...))"
        )
        alerts = AlertOptions(
            rules=rules,
            actions=actions,
            jsonl_path=jsonl_path,
            cooldown_steps=cooldown_steps,
            max_per_rule=max_per_rule,
            fold_steps=fold_steps,
        )
        # Only the alerts: the norm is not its to put into Keras's logs
        # (where it would be NaN, its own logs recorder reading nothing).
        super().__init__(
            log_dir,
            alerts=alerts,
            optimizer=optimizer,
            writer=writer,
            hub=hub,
            logs_key=None,
            read_every=1,  # as it always read
        )
