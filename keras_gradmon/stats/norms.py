"""L2 norms of many tensors together: from their elements (overflow-safe), or
from their own norms."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from keras_gradmon.graph import gate
from keras_gradmon.stats.layout import densify


def combine_norms(norms: tf.Tensor) -> tf.Tensor:
    """L2 norm of the concatenation of tensors, given each tensor's L2 norm.

    This is sqrt(sum of squares) of every element, never a sum of norms.
    It is scaled by the largest norm so that norms near the float32 limit do
    not overflow when squared.

    Args:
        norms: A 1-D float tensor of per-tensor L2 norms (may be empty).

    Returns:
        A scalar tensor of the same dtype; 0 for an empty input.

    Example:

    >>> float(combine_norms(tf.constant([3.0, 4.0])))
    5.0
    """
    norms = tf.convert_to_tensor(norms)
    largest = tf.maximum(tf.reduce_max(norms), tf.zeros([], norms.dtype))
    scale = tf.where(largest > 0, largest, tf.ones_like(largest))
    return scale * tf.sqrt(tf.reduce_sum(tf.square(norms / scale)))


def batched_global_norm(
    tensors: Sequence[tf.Tensor | tf.IndexedSlices | None],
) -> tuple[tf.Tensor, tf.Tensor]:
    """The L2 norm of all elements together, safe from overflow.

    Usually `tf.linalg.global_norm(tensors)` bit for bit, None skipped; a
    `tf.IndexedSlices` counts as its dense tensor, duplicate indices summed
    (`tf.linalg.global_norm` would count its values: another number when an
    index repeats); if that is not finite, one conditional recomputes it
    scaled, in float64 (finite float32 tensors can have a norm above
    float32's max). Shapes may be known only at run time.

    Args:
        tensors: Floating tensors; if of several or half-precision dtypes,
            cast to float32 (float64 if any is) first.

    Returns:
        `(norm, all_finite)`: a float64 scalar (cast to float32, the value of
        `tf.linalg.global_norm`, also when NaN or Inf) and whether every
        element is finite.

    Example:

    >>> norm, finite = batched_global_norm([tf.constant([3e38, 3e38])])
    >>> round(float(norm) / 1e38, 4), bool(finite)  # above float32's max
    (4.2426, True)
    """
    values = [densify(t) for t in tensors if t is not None]
    if not values:
        return tf.constant(0.0, tf.float64), tf.constant(True)
    dtypes = {v.dtype for v in values}
    if len(dtypes) > 1 or dtypes - {tf.float32, tf.float64}:
        wide = tf.float64 if tf.float64 in dtypes else tf.float32
        values = [tf.cast(v, wide) for v in values]
    fast = tf.linalg.global_norm(values)

    def rescue() -> tuple[tf.Tensor, tf.Tensor]:
        flat = tf.cast(tf.concat([tf.reshape(v, [-1]) for v in values], 0), tf.float64)
        finite = tf.math.is_finite(flat)
        largest = tf.reduce_max(tf.where(finite, tf.abs(flat), 0.0))
        scale = tf.where(largest > 0, largest, 1.0)
        norm = scale * tf.sqrt(tf.reduce_sum(tf.square(flat / scale)))
        all_finite = tf.reduce_all(finite)
        return tf.where(all_finite, norm, tf.cast(fast, tf.float64)), all_finite

    exact = (tf.cast(fast, tf.float64), tf.constant(True))
    return gate(tf.math.is_finite(fast), lambda: exact, rescue)
