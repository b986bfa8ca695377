"""`MonitorWriter`: writes a monitor's fresh statistics, once each."""

from __future__ import annotations

import weakref
from typing import Any

from keras_gradmon import distribute, loss_scale
from keras_gradmon.monitor import GradientMonitor
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from keras_gradmon.state import NO_STEP, Snapshot
from keras_gradmon.tags import histogram_summaries, scalar_summaries


class MonitorWriter:
    """Writes what a `GradientMonitor` recorded, skipping what was written.

    Args:
        monitor: The monitor (a wrapper's `.monitor`).
        recorder: Where to write.

    Example:

    >>> writer = MonitorWriter(optimizer.monitor, TensorBoardRecorder("logs"))
    >>> writer.write()  # after a train step  # doctest: +SKIP
    True

    Under a multi-worker strategy only the chief writes (TensorFlow's
    `strategy.extended.should_save_summary`); the other workers read the
    same numbers (`latest`, for Keras logs and alerts) and write nothing, not
    even an empty event file.
    """

    def __init__(self, monitor: GradientMonitor, recorder: TensorBoardRecorder) -> None:
        self.monitor = monitor
        self.recorder = recorder
        self.written_stats_step = NO_STEP
        self.written_hist_step = NO_STEP
        self.latest: Snapshot | None = None

    @property
    def writes(self) -> bool:
        """Whether this process writes (False on non-chief workers)."""
        return distribute.writes_summaries(self.monitor.state.stats_step)

    def pending(self) -> tuple[bool, bool]:
        """Whether unwritten scalars / histograms exist (two host reads)."""
        stats_step, hist_step = self.monitor.state.steps()
        return (
            stats_step not in (NO_STEP, self.written_stats_step),
            hist_step not in (NO_STEP, self.written_hist_step),
        )

    def write(self) -> bool:
        """Writes fresh scalars and histograms; returns whether it wrote any
        (on a non-chief worker: whether there was any to write)."""
        if not self.monitor.built:
            return False
        config = self.monitor.config
        fresh_stats, fresh_hist = self.pending()
        writes = self.writes
        if fresh_stats:
            snapshot = self.monitor.snapshot()
            if writes:
                self.recorder.write_scalars(
                    scalar_summaries(snapshot, config), snapshot.step
                )
            self.written_stats_step = snapshot.step
            self.latest = snapshot
        if fresh_hist and writes:
            histograms = self.monitor.histogram_snapshot()
            self.recorder.write_histograms(
                histogram_summaries(histograms, config), histograms.step
            )
            self.written_hist_step = histograms.step
        elif fresh_hist:
            self.written_hist_step = self.monitor.state.steps()[1]
        return fresh_stats or fresh_hist


_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def find_monitored(optimizer: Any) -> Any:
    """The `GradientMonitorOptimizer` in `optimizer` or among its inner ones.

    Raises:
        ValueError: If there is none, or if a `LossScaleOptimizer` wraps it
            (the monitor must wrap the loss scaler, see `loss_scale`).
    """
    current = optimizer
    for _ in range(8):
        if isinstance(getattr(current, "monitor", None), GradientMonitor):
            return current
        if loss_scale.is_loss_scaler(current):
            inner = getattr(current, "inner_optimizer", None)
            if isinstance(getattr(inner, "monitor", None), GradientMonitor):
                raise loss_scale.wrapped_monitor_error(optimizer)
        current = getattr(current, "inner_optimizer", None)
        if current is None:
            break
    raise ValueError(
        "Expected a keras_gradmon.GradientMonitorOptimizer (or an optimizer "
        f"wrapping one). Received: optimizer={optimizer!r}"
    )


def write_summaries(optimizer: Any, writer: Any) -> bool:
    """Writes the statistics `optimizer` recorded since the last call.

    The one line a custom training loop needs after `apply_gradients`.
    Statistics already written are not written again, so calling it every
    step costs two small host reads on steps without fresh statistics.

    Args:
        optimizer: A `GradientMonitorOptimizer` (Keras 3 or tf_keras), or an
            optimizer wrapping one.
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
    monitored = find_monitored(optimizer)
    per_optimizer = _writers.setdefault(monitored, {})
    key = writer if isinstance(writer, str) else id(writer)
    if key not in per_optimizer:
        recorder = (
            TensorBoardRecorder(log_dir=writer)
            if isinstance(writer, str)
            else TensorBoardRecorder(writer=writer)
        )
        per_optimizer[key] = MonitorWriter(monitored.monitor, recorder)
    return per_optimizer[key].write()
