"""`GradientSummaryCallback`: writes the monitor's statistics during `fit`."""

from __future__ import annotations

import math
from typing import Any

import keras

from keras_gradmon.recorders.monitor_writer import MonitorWriter, find_monitored
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder


def _may_have_fired(frequency: Any, first: int, end: int) -> bool:
    """Whether an int frequency has a summary step in [first, end)."""
    if callable(frequency):
        return True
    return end > first and -(-first // frequency) * frequency < end


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
        self._steps_done = 0
        self._epoch_steps_done = 0
        self._pending = False

    @property
    def monitor_writer(self) -> MonitorWriter:
        if self._writer is None:
            optimizer = self._optimizer or getattr(self.model, "optimizer", None)
            self._writer = MonitorWriter(
                find_monitored(optimizer).monitor, self._recorder
            )
        return self._writer

    def on_train_begin(self, logs: dict | None = None) -> None:
        optimizer = find_monitored(self._optimizer or self.model.optimizer)
        self._steps_done = int(optimizer.iterations.numpy())
        self._pending = False

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch_steps_done = 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        first = self._steps_done
        self._steps_done += batch + 1 - self._epoch_steps_done
        self._epoch_steps_done = batch + 1
        config = self.monitor_writer.monitor.config
        due = any(
            _may_have_fired(frequency, first, self._steps_done)
            for frequency in (config.every_n_steps, config.histogram_every_n_steps)
            if frequency is not None
        )
        if due or self._pending:
            # A skipped (non-finite) step leaves the iteration count behind
            # our count: when a due summary is missing, keep looking each
            # batch until it shows up.
            self._pending = not self.monitor_writer.write()
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
