"""`write_summaries`: the one call a custom training loop needs to write
what a monitored optimizer recorded."""

from __future__ import annotations

import weakref
from typing import Any

from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from keras_gradmon.writer import MonitorWriter

_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def write_summaries(optimizer: Any, writer: Any) -> bool:
    """Writes the statistics `optimizer` recorded since the last call.

    The one line a custom training loop needs after `apply_gradients`;
    what it writes is flushed to the event file at once.
    Statistics already written are not written again, so calling it every
    step costs two small host reads on steps without fresh statistics.

    Args:
        optimizer: A monitored optimizer (any adapter), or an optimizer
            wrapping one.
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
    from keras_gradmon.wrapping import find_monitored

    monitored = find_monitored(optimizer)
    per_optimizer = _writers.setdefault(monitored.monitor, {})
    key = writer if isinstance(writer, str) else id(writer)
    if key not in per_optimizer:
        recorder = (
            TensorBoardRecorder(log_dir=writer)
            if isinstance(writer, str)
            else TensorBoardRecorder(writer=writer)
        )
        label = monitored._monitor_name()
        per_optimizer[key] = MonitorWriter(monitored.monitor, [recorder], label)
    return per_optimizer[key].write()
