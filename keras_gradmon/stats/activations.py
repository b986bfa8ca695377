"""Statistics of a layer's activations over a batch: dead and saturated units.

A layer's output `y` has its units on the last axis (a Dense layer's units,
a convolution's channels); every other axis (batch, time, space) holds
samples of those units. Plain tensor math, XLA-safe.
"""

from __future__ import annotations

import tensorflow as tf

#: Activations whose output saturates, and the values counted as saturated:
#: |tanh| >= 0.99 and sigmoid <= 0.01 or >= 0.99. There the derivative is
#: below 2% (tanh) and 4% (sigmoid) of its peak, so almost no gradient flows.
SATURATING = ("tanh", "sigmoid")
TANH_SATURATION = 0.99
SIGMOID_SATURATION = 0.01


def _units_last(y: tf.Tensor) -> tf.Tensor:
    """`y` as `[samples, units]`: every axis but the last one flattened."""
    y = tf.convert_to_tensor(y)
    if y.shape.rank == 0:
        return tf.reshape(y, [1, 1])
    units = y.shape[-1] if y.shape[-1] is not None else tf.shape(y)[-1]
    return tf.reshape(y, [-1, units])


def dead_units(y: tf.Tensor) -> tf.Tensor:
    """Which units output exactly zero for every sample (a boolean vector).

    Args:
        y: A layer's output, units on the last axis.

    Returns:
        A boolean `[units]` tensor; all False when `y` holds no samples.

    Example:

    >>> dead_units(tf.constant([[0.0, 1.0], [0.0, 0.0]])).numpy().tolist()
    [True, False]
    """
    samples = _units_last(y)
    has_samples = tf.shape(samples)[0] > 0
    return tf.logical_and(tf.reduce_all(tf.equal(samples, 0), axis=0), has_samples)


def dead_fraction(y: tf.Tensor) -> tf.Tensor:
    """The fraction of units whose output is exactly zero for every sample.

    Args:
        y: A layer's output, units on the last axis.

    Returns:
        A float32 scalar in [0, 1]; 0 when `y` holds no samples.

    Example:

    >>> float(dead_fraction(tf.constant([[0.0, 1.0], [0.0, 0.0]])))
    0.5
    """
    return tf.reduce_mean(tf.cast(dead_units(y), tf.float32))


def saturated_fraction(y: tf.Tensor, activation: str) -> tf.Tensor:
    """The fraction of a tanh or sigmoid layer's outputs in saturation.

    Counted over every output (each unit on each sample): a unit saturated
    for some samples passes almost no gradient for those samples.

    Args:
        y: A tanh or sigmoid layer's output.
        activation: "tanh" or "sigmoid".

    Returns:
        A float32 scalar in [0, 1]; 0 for an empty `y`.

    Example:

    >>> float(saturated_fraction(tf.constant([0.995, 0.5, -0.999, 0.0]), "tanh"))
    0.5
    """
    if activation not in SATURATING:
        raise ValueError(
            f"`activation` must be one of {list(SATURATING)}. "
            f"Received: activation={activation!r}"
        )
    y = tf.cast(tf.reshape(tf.convert_to_tensor(y), [-1]), tf.float32)
    if activation == "tanh":
        saturated = tf.abs(y) >= TANH_SATURATION
    else:
        saturated = tf.logical_or(
            y <= SIGMOID_SATURATION, y >= 1.0 - SIGMOID_SATURATION
        )
    size = tf.cast(tf.size(y), tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(tf.cast(saturated, tf.float32)), size)
