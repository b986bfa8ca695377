"""`GradientSummaryCallback`: writes the monitor's statistics during `fit`."""

from __future__ import annotations

import math
from typing import Any

import keras

from keras_gradmon.callbacks.schedule import SummarySchedule, monitored_iterations
from keras_gradmon.recorders.monitor_writer import MonitorWriter, find_monitored
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder


class GradientSummaryCallback(keras.callbacks.Callback):
    """Writes what `GradientMonitorOptimizer` recorded to TensorBoard and logs.

    Scalars and histograms are written at the optimizer's configured
    frequencies, with the optimizer's iteration count as the step. The
    global gradient norm also goes into Keras `logs` under `logs_key`, so it
    shows in the progress bar, `History` and `CSVLogger`.

    On steps without fresh statistics the callback reads nothing from the
    device: with an int frequency it knows from the step count when a summary
    can have happened.

    Args:
        log_dir: Directory for the event file (created lazily). Use a
            directory of its own, or Keras's `<log_dir>/train` to put the
            gradients beside the `TensorBoard` callback's loss curves.
        writer: An existing `tf.summary` writer, instead of `log_dir`.
        optimizer: The monitored optimizer; defaults to `model.optimizer`
            (or the `GradientMonitorOptimizer` it wraps).
        logs_key: The Keras logs key of the global gradient norm, or None.

    Example:

    ```python
    model.compile(optimizer=keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(), every_n_steps=10), loss="mse")
    model.fit(x, y, callbacks=[keras_gradmon.GradientSummaryCallback("logs/grads")])
    ```
    """

    # Safe on Keras's callback worker thread: snapshots re-read when a newer
    # step lands mid-read, and the writer is only used from this callback.
    async_safe = True

    def __init__(
        self,
        log_dir: str | None = None,
        writer: Any = None,
        optimizer: Any = None,
        logs_key: str | None = "grad_norm",
    ) -> None:
        super().__init__()
        self._recorder = TensorBoardRecorder(log_dir=log_dir, writer=writer)
        self._optimizer = optimizer
        self.logs_key = logs_key
        self._writer: MonitorWriter | None = None
        self._schedule: SummarySchedule | None = None

    @property
    def monitor_writer(self) -> MonitorWriter:
        if self._writer is None:
            optimizer = self._optimizer or getattr(self.model, "optimizer", None)
            self._writer = MonitorWriter(
                find_monitored(optimizer).monitor, self._recorder
            )
        return self._writer

    def on_train_begin(self, logs: dict | None = None) -> None:
        config = self.monitor_writer.monitor.config
        self._schedule = SummarySchedule(
            [config.every_n_steps, config.histogram_every_n_steps]
        )
        optimizer = find_monitored(self._optimizer or self.model.optimizer)
        self._schedule.start(monitored_iterations(optimizer))

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        if self._schedule is not None:
            self._schedule.epoch_start()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self._schedule is not None and self._schedule.due(batch):
            self._schedule.found(self.monitor_writer.write())
        self._update_logs(logs)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.monitor_writer.write()
        self._update_logs(logs)

    def on_train_end(self, logs: dict | None = None) -> None:
        self.monitor_writer.write()
        self._recorder.flush()

    def _update_logs(self, logs: dict | None) -> None:
        if logs is None or self.logs_key is None:
            return
        latest = self.monitor_writer.latest
        logs[self.logs_key] = latest.totals["grad_norm"] if latest else math.nan
