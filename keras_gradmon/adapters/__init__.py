"""The adapters: one per optimizer framework, each a thin layer of framework
glue around the one core, `keras_gradmon.core.monitor.GradientMonitor`.

- `keras3.GradientMonitorOptimizer`: Keras 3 optimizers.
- `tf_keras.TfKerasGradientMonitorOptimizer`: tf_keras optimizers.
- `tf_v1.V1GradientMonitorOptimizer`: `tf.compat.v1.train` optimizers.

`wrap` picks the adapter.
"""

from __future__ import annotations

from typing import Any

from keras_gradmon.adapters.base import check_not_monitored
from keras_gradmon.adapters.kinds import (
    SUPPORTED,
    kind_of,
    unsupported_error,
)


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
        from keras_gradmon.adapters.keras3 import GradientMonitorOptimizer

        if "step" in options:
            raise ValueError(
                "`step` is for tf_keras and tf.compat.v1.train optimizers; a "
                "Keras 3 wrapper records against the optimizer's `iterations`. "
                f"Received: step={options['step']!r}"
            )
        return GradientMonitorOptimizer(optimizer, config=config, name=name, **options)
    if kind == "tf_keras":
        from keras_gradmon.adapters.tf_keras import (
            TfKerasGradientMonitorOptimizer,
        )

        return TfKerasGradientMonitorOptimizer(optimizer, config, name, **options)
    if kind == "tf_v1":
        from keras_gradmon.adapters.tf_v1 import (
            V1GradientMonitorOptimizer,
        )

        return V1GradientMonitorOptimizer(optimizer, config, name, **options)
    raise unsupported_error(optimizer)


__all__ = ["SUPPORTED", "kind_of", "wrap"]
