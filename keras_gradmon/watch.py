"""The ways in: `wrap` an optimizer, and `write_summaries` in a custom loop.

Example:

```python
optimizer = keras_gradmon.wrap(keras.optimizers.Adam(1e-3), every_n_steps=10)
...  # a custom training loop calling optimizer.apply(grads, variables)
keras_gradmon.write_summaries(optimizer, "logs/train")
```
"""

from __future__ import annotations

import weakref
from typing import Any

from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from keras_gradmon.wrapping import check_not_monitored, kind_of, unsupported_error
from keras_gradmon.writer import MonitorWriter


def wrap(optimizer: Any, config: Any = None, name: str | None = None, **options: Any):
    """Wraps `optimizer` in the monitor adapter of its kind.

    Args:
        optimizer: A Keras 3, tf_keras or `tf.compat.v1.train` optimizer.
        config: A `MonitorConfig` (or a dict of its options).
        name: The wrapper's name; also its default `tag_scope`.
        **options: `MonitorConfig` options, and `step=` (an integer
            `tf.Variable` to record against) for tf_keras and
            `tf.compat.v1.train` optimizers.

    Returns:
        The wrapper: an optimizer of the same framework as `optimizer`.

    Raises:
        ValueError: For anything that is not an optimizer of a supported
            kind, or an optimizer that is already monitored.

    Example:

    >>> optimizer = keras_gradmon.wrap(
    ...     tf.compat.v1.train.AdamOptimizer(1e-3), every_n_steps=100
    ... )  # doctest: +SKIP
    """
    check_not_monitored(optimizer)
    kind = kind_of(optimizer)
    if kind == "keras3":
        from keras_gradmon.keras3 import GradientMonitorOptimizer

        if "step" in options:
            raise ValueError(
                "`step` is for tf_keras and tf.compat.v1.train optimizers; a "
                "Keras 3 wrapper records against the optimizer's `iterations`. "
                f"Received: step={options['step']!r}"
            )
        return GradientMonitorOptimizer(optimizer, config=config, name=name, **options)
    if kind is None:
        raise unsupported_error(optimizer)
    from keras_gradmon.legacy import wrapper_for

    return wrapper_for(optimizer, config, name, **options)


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
