"""Statistics of a layer's activations over a batch: dead and saturated units.

A layer's output `y` has its units on the last axis (a Dense layer's units,
a convolution's channels); every other axis (batch, time, space) holds
samples of those units. Plain tensor math in `keras.ops`, the same on the
TensorFlow and JAX backends, XLA-safe.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from keras import ops

from keras_gradmon.backend import Tensor

#: Activations whose output saturates, and the values counted as saturated:
#: |tanh| >= 0.99 and sigmoid <= 0.01 or >= 0.99. There the derivative is
#: below 2% (tanh) and 4% (sigmoid) of its peak, so almost no gradient flows.
SATURATING = ("tanh", "sigmoid")
TANH_SATURATION = 0.99
SIGMOID_SATURATION = 0.01


def _units_last(y: Any) -> Tensor:
    """`y` as `[samples, units]`: every axis but the last one flattened."""
    y = ops.convert_to_tensor(y)
    if len(y.shape) == 0:
        return ops.reshape(y, [1, 1])
    # A dimension known only at run time is a tensor in `ops.shape`.
    return ops.reshape(y, [-1, ops.shape(y)[-1]])


def dead_units(y: Any) -> Tensor:
    """Which units output exactly zero for every sample (a boolean vector).

    Args:
        y: A layer's output, units on the last axis.

    Returns:
        A boolean `[units]` tensor; all False when `y` holds no samples.

    Example:

    >>> import numpy as np
    >>> np.asarray(dead_units(np.array([[0.0, 1.0], [0.0, 0.0]]))).tolist()
    [True, False]
    """
    samples = _units_last(y)
    has_samples = ops.shape(samples)[0] > 0
    return ops.logical_and(ops.all(ops.equal(samples, 0), axis=0), has_samples)


def exact_dead_fraction(mask: Any) -> float:
    """The fraction of dead units from a `dead_units` mask read back to the
    host, exactly (a float64 ratio; 0 for no units). A float32 ratio can
    round above itself (3/10 to 0.30000001), past a threshold equal to it,
    so the activation rules read this one.

    Example:

    >>> exact_dead_fraction([True, False, False, True, False, False, False,
    ...                      False, False, False]) > 0.2
    False
    """
    mask = np.asarray(mask, dtype=bool)
    return np.count_nonzero(mask) / mask.size if mask.size else 0.0


def dead_fraction(y: Any) -> Tensor:
    """The fraction of units whose output is exactly zero for every sample.

    Args:
        y: A layer's output, units on the last axis.

    Returns:
        A float32 scalar in [0, 1]; 0 when `y` holds no samples.

    Example:

    >>> import numpy as np
    >>> float(dead_fraction(np.array([[0.0, 1.0], [0.0, 0.0]])))
    0.5
    """
    return ops.mean(ops.cast(dead_units(y), "float32"))


def saturated_fraction(y: Any, activation: str) -> Tensor:
    """The fraction of a tanh or sigmoid layer's outputs in saturation.

    Counted over every output (each unit on each sample): a unit saturated
    for some samples passes almost no gradient for those samples.

    Args:
        y: A tanh or sigmoid layer's output.
        activation: "tanh" or "sigmoid".

    Returns:
        A float32 scalar in [0, 1]; 0 for an empty `y`.

    Example:

    >>> import numpy as np
    >>> float(saturated_fraction(np.array([0.995, 0.5, -0.999, 0.0]), "tanh"))
    0.5
    """
    if activation not in SATURATING:
        raise ValueError(
            f"`activation` must be one of {list(SATURATING)}. "
            f"Received: activation={activation!r}"
        )
    y = ops.cast(ops.reshape(ops.convert_to_tensor(y), [-1]), "float32")
    if activation == "tanh":
        saturated = ops.abs(y) >= TANH_SATURATION
    else:
        saturated = ops.logical_or(
            y <= SIGMOID_SATURATION, y >= 1.0 - SIGMOID_SATURATION
        )
    size = ops.cast(ops.size(y), "float32")
    return ops.divide_no_nan(ops.sum(ops.cast(saturated, "float32")), size)
