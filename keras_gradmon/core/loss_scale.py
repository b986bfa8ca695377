"""Loss scaling (mixed_float16) seen from the monitor.

With loss scaling the gradients an optimizer receives are `scale` times the
true ones. The monitor wraps the loss scaler,
`GradientMonitorOptimizer(LossScaleOptimizer(inner))`, so it sees every step,
the skipped ones too, and it measures and clips `grads / scale`: the
unscaled gradients, in float32 or wider. Dynamic loss scales are powers of
two, so unscaling and scaling back (after clipping) are exact.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from keras import ops

from keras_gradmon import backend


def _wide(dtype: Any) -> str:
    """float64 for float64 gradients, else float32 (half precision widened)."""
    import keras

    return (
        "float64" if keras.backend.standardize_dtype(dtype) == "float64" else "float32"
    )


def is_loss_scaler(optimizer: Any) -> bool:
    """Whether `optimizer` is a `LossScaleOptimizer` (Keras 3's, or tf_keras's
    where tf_keras is in use). Neither is imported here: an optimizer of a
    library that was never imported cannot exist."""
    keras = sys.modules.get("keras")
    if keras is not None and isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return True
    tf_keras = sys.modules.get("tf_keras")
    return tf_keras is not None and isinstance(
        optimizer, tf_keras.mixed_precision.LossScaleOptimizer
    )


def current_scale(optimizer: Any, values: Any = None) -> Any:
    """The factor the gradients handed to `optimizer` carry, or None for 1.

    A `LossScaleOptimizer`'s dynamic scale, or a plain optimizer's static
    `loss_scale_factor`. `values` maps a variable to its value where the
    variables do not hold it (JAX's `stateless_apply`).

    Example:

    >>> import keras
    >>> float(current_scale(keras.optimizers.SGD(loss_scale_factor=8.0)))
    8.0
    """
    if is_loss_scaler(optimizer):
        scale = optimizer.dynamic_scale
        scale = scale if values is None else values(scale)
        return ops.cast(ops.convert_to_tensor(scale), "float32")
    factor = getattr(optimizer, "loss_scale_factor", None)
    return None if factor is None else ops.convert_to_tensor(float(factor), "float32")


def unscale(grads: Sequence[Any], scale: Any) -> list[Any]:
    """`grads / scale`, computed in float32 (float64 for float64 gradients).

    Example:

    >>> import numpy as np
    >>> [g] = unscale([np.array([8.0], "float16")], ops.convert_to_tensor(4.0))
    >>> ops.convert_to_numpy(g).tolist()
    [2.0]
    """
    if scale is None:
        return list(grads)
    out = []
    for g in grads:
        if g is None:
            out.append(None)
            continue
        g = backend.densify(g)
        dtype = _wide(g.dtype)
        out.append(ops.cast(g, dtype) / ops.cast(scale, dtype))
    return out


def rescale(grads: Sequence[Any], scale: Any, like: Sequence[Any]) -> list[Any]:
    """The inverse of `unscale`: `grads * scale`, in the dtypes of `like`."""
    if scale is None:
        return [g if g is None else ops.cast(g, r.dtype) for g, r in zip(grads, like)]
    return [
        None if g is None else ops.cast(g * ops.cast(scale, g.dtype), r.dtype)
        for g, r in zip(grads, like)
    ]


def will_apply(optimizer: Any, grads: Sequence[Any]) -> Any:
    """Whether a `LossScaleOptimizer` will apply `grads` (all finite), by its
    own test; None for other optimizers (they apply every step)."""
    if not is_loss_scaler(optimizer):
        return None
    return optimizer.check_finite(list(grads))


def double_scaling_error(monitor_name: str, value: Any) -> ValueError:
    """The error for a loss scaler wrapped around a monitor that already
    wraps one: the loss would be scaled, and the gradients unscaled, twice."""
    return ValueError(
        f"GradientMonitorOptimizer {monitor_name!r} wraps a LossScaleOptimizer "
        "and is itself being wrapped by an optimizer that sets its "
        "`loss_scale_factor` (a second LossScaleOptimizer: `model.compile` "
        "adds one under the 'mixed_float16' policy): the loss would be scaled "
        "twice. Compile with `model.compile(optimizer=GradientMonitorOptimizer("
        "LossScaleOptimizer(...)), auto_scale_loss=False)`. Received: "
        f"loss_scale_factor={value!r}"
    )


def wrapped_monitor_error(outer: Any) -> ValueError:
    """The error for `LossScaleOptimizer(GradientMonitorOptimizer(...))`."""
    return ValueError(
        "A LossScaleOptimizer wraps the GradientMonitorOptimizer: it calls "
        "the monitor only on the steps it applies, so the steps it skips "
        "(non-finite scaled gradients) could never be counted. Put the loss "
        "scaler inside the monitor: "
        "`GradientMonitorOptimizer(keras.optimizers.LossScaleOptimizer(inner))`"
        ", and under the 'mixed_float16' policy compile with "
        "`model.compile(optimizer=..., auto_scale_loss=False)` so that Keras "
        f"does not add a second one. Received: optimizer={outer!r}"
    )
