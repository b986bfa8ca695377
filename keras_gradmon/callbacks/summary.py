"""`GradientSummaryCallback`: writes the monitor's statistics during `fit`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import keras

from keras_gradmon.adapters.base import MonitoredOptimizer
from keras_gradmon.callbacks.dispatch import BatchReads
from keras_gradmon.callbacks.steps import (
    StepTracker,
    monitored_optimizer,
    optimizer_step,
)
from keras_gradmon.columns import GLOBAL, tag
from keras_gradmon.hub import Hub, check_hub, check_recorders
from keras_gradmon.recorders.base import Recorder
from keras_gradmon.recorders.keras_logs import KerasLogsRecorder
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from keras_gradmon.recorders.writer import MonitorWriter


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
