"""Which optimizer steps `fit`'s batches covered, counted on the host.

`ActivationMonitorCallback`: activation statistics and dead-ReLU tracking
during `fit`.

Batch hooks that Keras may run off the training thread.

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

`GradientSummaryCallback`: writes the monitor's statistics during `fit`.

`GradientAlertCallback`: alerts on exploding, vanishing and non-finite
gradients during `fit`, and optionally stops or fails training.

Thin Keras callbacks around the recorders.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import numpy as np

from keras_gradmon.activations.monitor import ActivationMonitor, ActivationOptions
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.delivery import Action, AlertChecker, alerting
from keras_gradmon.alerts.events import Alert
from keras_gradmon.alerts.incidents import DEFAULT_FOLD_STEPS
from keras_gradmon.columns import GLOBAL, tag
from keras_gradmon.hub import Hub, Recorder, check_hub, check_recorders
from keras_gradmon.recorders.keras_logs import KerasLogsRecorder
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from keras_gradmon.wrapping import MonitoredOptimizer, find_monitored
from keras_gradmon.writer import MonitorWriter

# ---- from callbacks.steps ----

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
    a batch takes (a `train_step` may apply the optimizer several times:
    a WGAN's critic steps); batches are then counted from it, several
    steps per batch with `steps_per_execution`. A step skipped for
    non-finite gradients does not advance the optimizer's count, so within
    an epoch the host count can run ahead by the skips (callers that must
    not miss a summary look again until they find it).

    Args:
        read: Reads the optimizer's iteration count, or None to take one
            step per batch.

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

    def __init__(self, read: Callable[[], int] | None = None) -> None:
        self.read = read
        self.epoch_first = 0
        self.done = 0
        #: Optimizer steps per batch (1 until measured).
        self.per_batch = 1.0

    def start_epoch(self, iterations: int) -> None:
        self.epoch_first = int(iterations)
        self.done = 0

    def batch_start(self, batch: int) -> int:
        """The step the batch with index `batch` starts at."""
        return self.epoch_first + self._steps(batch)

    def batch_end(self, batch: int) -> tuple[int, int]:
        """`[first, end)`: the steps run since the previous `batch_end`."""
        if self.done == 0 and self.read is not None:
            taken = int(self.read()) - self.epoch_first
            if taken > 0:
                self.per_batch = taken / (batch + 1)
        first = self.epoch_first + self._steps(self.done)
        self.done = max(self.done, batch + 1)
        return first, self.epoch_first + self._steps(self.done)

    def _steps(self, batches: int) -> int:
        return round(self.per_batch * batches)


# ---- from callbacks.activations ----

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
        options: An `ActivationOptions`, or the probe batch `data` of model
            inputs (a few hundred held-out samples: the window over which a
            unit must stay at zero to count as dead).
        model: The model, when known before `fit` (checks `layers` now;
            unknown names are an error listing the model's layers, else
            when `fit` starts).
        hub: Publish to this `keras_gradmon.hub.Hub` (shared with the
            gradient and RL monitors) instead of one of its own.
        **overrides: Options (`ActivationOptions` fields) one by one, as
            for `ActivationMonitor`: `log_dir` / `writer`, `layers`,
            `every_n_steps`, `histogram_buckets`, `std_band`,
            `dead_fraction`, `rules`, `actions`, `jsonl_path`,
            `cooldown_steps`, `max_per_rule`, `tag_scope`, `fold_steps`.

    Example:

    ```python
    model.fit(x, y, callbacks=[keras_gradmon.ActivationMonitorCallback(
        x_val[:256], log_dir="logs/activations", every_n_steps=100)])
    ```
    """

    def __init__(
        self,
        options: ActivationOptions | Any = None,
        *,
        model: Any = None,
        hub: Hub | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__()
        # Everything that can be checked without the model, checked now.
        name = type(self).__name__
        self._options = ActivationOptions.of(options, overrides, name)
        check_hub(hub, self._options.log_dir, self._options.writer)
        self._hub = hub
        self.monitor: ActivationMonitor | None = None
        self._steps = StepTracker()
        self._previous: int | None = None
        if model is not None:
            self.set_model(model)

    @property
    def alerts(self) -> list[Alert]:
        """Every activation alert emitted so far, in order."""
        return self.monitor.alerts if self.monitor else []

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        if self.monitor is None or self._monitored_model is not model:
            self.monitor = ActivationMonitor(model, self._options, hub=self._hub)
            self._monitored_model = model

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._previous = None

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
        self.monitor.close()


# ---- from callbacks.dispatch ----

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


# ---- from callbacks.summary ----

class GradientSummaryCallback(BatchReads, keras.callbacks.Callback):
    """Writes what a monitored optimizer recorded, during `fit`.

    Scalars and histograms go to TensorBoard (and to any extra `recorders`)
    at the optimizer's configured frequencies, with the optimizer's step;
    the global gradient norm also goes into Keras `logs` under `logs_key`
    (progress bar, `History`, `CSVLogger`). On steps without fresh
    statistics the callback reads nothing from the device; on the others it
    takes two raw variable reads and leaves reading back and writing to a
    worker thread. The event file is closed when training ends.

    Args:
        log_dir: Directory for the event file (created lazily). Use a
            directory of its own, or Keras's `<log_dir>/train` to put the
            gradients beside the `TensorBoard` callback's loss curves.
        writer: An existing `tf.summary` writer, instead of `log_dir`.
        optimizer: The monitored optimizer; defaults to `model.optimizer`.
        logs_key: The Keras logs key of the global gradient norm, or None.
        recorders: More destinations (`keras_gradmon.recorders`: JSON
            Lines, console, or your own `Recorder`).
        hub: A `keras_gradmon.hub.Hub` shared with other monitors
            (activations, RL health), instead of `log_dir` / `writer`: the
            statistics go to its recorders (and `recorders` are added to it).

    Example:

    ```python
    model.compile(optimizer=keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(), every_n_steps=10), loss="mse")
    model.fit(x, y, callbacks=[keras_gradmon.GradientSummaryCallback("logs/grads")])
    ```
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
        super().__init__()
        check_hub(hub, log_dir, writer)
        self._tensorboard = (
            TensorBoardRecorder(log_dir=log_dir, writer=writer) if hub is None else None
        )
        self._hub = hub
        self._extra = check_recorders(recorders)
        if logs_key is not None and not (isinstance(logs_key, str) and logs_key):
            raise ValueError(
                "`logs_key` must be a non-empty string or None. "
                f"Received: logs_key={logs_key!r}"
            )
        self.logs_key = logs_key
        self._optimizer = optimizer
        self._logs: KerasLogsRecorder | None = None
        self._writer: MonitorWriter | None = None
        self._steps = StepTracker()

    @property
    def monitor_writer(self) -> MonitorWriter:
        """The writer of the monitored optimizer (made when training starts)."""
        if self._writer is None:
            monitored = self._monitored()
            scope = monitored.monitor.config.tag_scope
            norm = tag("grad_norm", GLOBAL, scope)
            self._logs = KerasLogsRecorder(
                {self.logs_key: norm} if self.logs_key else {}
            )
            self._logs_resolved = False
            recorders = [self._tensorboard, self._logs, *self._extra]
            self._writer = MonitorWriter(
                monitored.monitor,
                [r for r in recorders if r is not None],
                monitored._monitor_name(),
                asynchronous=True,
                hub=self._hub,
            )
        return self._writer

    def _monitored(self) -> MonitoredOptimizer:
        return monitored_optimizer(
            type(self).__name__, self._optimizer, getattr(self, "model", None)
        )

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.monitor_writer  # noqa: B018 - resolves the optimizer now
        self._steps = StepTracker(read=lambda: optimizer_step(self._monitored()))
        self._start_reads()

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._steps.start_epoch(optimizer_step(self._monitored()))

    def _batch_logs(self, logs: dict | None) -> None:
        self.monitor_writer.write_immediate()
        self._logs.update(logs)

    def _read_batch(self, batch: int) -> None:
        """Captures what the steps up to the end of `batch` recorded, if a
        summary can be among them."""
        first, end = self._steps.batch_end(batch)
        writer = self.monitor_writer
        monitor = writer.monitor
        scalars = monitor.schedule.any_due(first, end)
        histograms = monitor.histogram_schedule.any_due(first, end)
        # After a look that found nothing (a skipped step delayed the
        # summary): look after every step until it shows up.
        missed = writer.missed
        if scalars or histograms or missed:
            writer.claim()  # the tag scope is known from here on
            self._resolve_logs_keys()
            writer.capture(scalars or missed, histograms or missed)

    def _resolve_logs_keys(self) -> None:
        """Keys the Keras logs to the global norm's tag, once the monitor's
        tag scope is known (it may be derived when the writer claims)."""
        if self.logs_key and not self._logs_resolved:
            scope = self.monitor_writer.monitor.tags.scope
            self._logs.keys = {self.logs_key: tag("grad_norm", GLOBAL, scope)}
            self._logs_resolved = True

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._read_last()
        self.monitor_writer.write()  # what is queued first, then what is fresh
        self.monitor_writer.flush()
        self.monitor_writer.write_immediate()
        self._logs.update(logs)

    def on_train_end(self, logs: dict | None = None) -> None:
        self.monitor_writer.close()


# ---- from callbacks.alerts ----

class GradientAlertCallback(BatchReads, keras.callbacks.Callback):
    """Runs alert rules on each fresh summary of a `GradientMonitorOptimizer`.

    Each alert is an entry of `alerts`, an `alerts/<rule>` scalar (0 or 1
    at each summary) when `log_dir` or `writer` is given and, optionally, a
    JSON line. On the console (logger "keras_gradmon") alerts are grouped
    into incidents: the first of each (rule, subject, tier) is one readable
    line, its repeats fold into a few lines (see `fold_steps`).
    Keras `logs` get `grad_alerts`, the number of alerts so far. The tier's
    action then runs: "log", "stop" (sets `model.stop_training`, as
    `TerminateOnNaN` does), "raise" (`GradientAlertError` with the step, rule
    and value) or a callable taking the `Alert`.

    Rules see each summary once (a rule never fires again on numbers it has
    seen); a diverging run logs a handful of lines, not one per step.
    `cooldown_steps` / `max_per_rule` thin out the alerts themselves.

    Args:
        rules: Rules by name (or a list); None for
            `keras_gradmon.alerts.default_rules()` (non-finite gradients,
            10x growth within 3 summaries, spikes, also between summaries,
            skipped spikes, more than half of the last 1,000 steps clipped,
            an update/weight ratio out of band).
        actions: `{"warning": action, "critical": action}`; "log" by default.
        optimizer: The monitored optimizer; defaults to `model.optimizer`.
        log_dir: Directory for the `alerts/<rule>` scalars, or `writer`.
        writer: An existing `tf.summary` writer.
        jsonl_path: Append each alert as a JSON line to this file.
        cooldown_steps: Do not repeat the same rule, tier and subject within
            this many steps.
        max_per_rule: At most this many alerts per rule and tier.
        hub: A `keras_gradmon.hub.Hub` to publish the flags and alert texts
            to (its recorders get them), instead of `log_dir` / `writer`.
        fold_steps: The log lines group alerts into incidents (rule,
            subject, tier): the first in full, repeats folded into one line
            after `fold_steps` steps (then 2x, 4x, ... as many), one line
            when the incident ends (quiet for `fold_steps` steps). None logs
            every alert in full. The alerts themselves are all kept.

    Example:

    ```python
    from keras_gradmon.alerts import ThresholdRule
    model.fit(x, y, callbacks=[keras_gradmon.GradientAlertCallback(
        rules=[ThresholdRule(warning=1e4, critical=5e4)],
        actions={"critical": "stop"})])
    ```
    """

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
        super().__init__()
        # Every argument is checked now, not when `fit` starts.
        self._engine, self._delivery = alerting(
            rules,
            actions,
            log_dir,
            writer,
            jsonl_path,
            cooldown_steps,
            max_per_rule,
            hub,
            fold_steps,
        )
        self._optimizer = optimizer
        self.checker: AlertChecker | None = None
        self._steps = StepTracker()
        self._pending = False

    @property
    def alerts(self) -> list[Alert]:
        """Every alert emitted so far, in order."""
        return self._engine.history

    def on_train_begin(self, logs: dict | None = None) -> None:
        if self.checker is None:
            monitored = monitored_optimizer(
                type(self).__name__, self._optimizer, self.model
            )
            self.checker = AlertChecker.from_parts(
                monitored, self._engine, self._delivery
            )
        optimizer = self.checker.optimizer
        self._steps = StepTracker(read=lambda: optimizer_step(optimizer))
        self._pending = False
        self._start_reads()

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._steps.start_epoch(optimizer_step(self.checker.optimizer))

    def _batch_logs(self, logs: dict | None) -> None:
        self._update_logs(logs)

    def _read_batch(self, batch: int) -> None:
        """Checks the rules if a summary can be among the steps up to the
        end of `batch`."""
        first, end = self._steps.batch_end(batch)
        schedule = self.checker.optimizer.monitor.schedule
        if schedule.any_due(first, end) or self._pending:
            # Not found: a skipped step delayed it; look until it shows up.
            self._pending = not self._check()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._check()
        self._update_logs(logs)

    def on_train_end(self, logs: dict | None = None) -> None:
        self._delivery.close()

    def _check(self) -> bool:
        before = self.checker.checked_step
        self.checker.check()
        if self.checker.stop_requested:
            self.model.stop_training = True
        return self.checker.checked_step != before

    def _update_logs(self, logs: dict | None) -> None:
        if logs is not None:
            logs["grad_alerts"] = float(len(self.alerts))


# ---- from callbacks ----


