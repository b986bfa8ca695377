"""Histogram bucket counts with plain ops (`tf.histogram_fixed_width` and
`tf.summary.histogram` do not compile under XLA).

Buckets follow TensorBoard's own convention (`tf.summary.histogram`): `k`
equal-width buckets spanning [min, max] of the finite elements, the last one
closed on the right; when all finite values are equal, every element lands in
the last bucket. Non-finite elements are left out (they are counted by the
`nonfinite` statistic).
"""

from __future__ import annotations

import tensorflow as tf


def bucket_counts(x: tf.Tensor, buckets: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Counts of the finite elements of `x` in `buckets` equal-width buckets.

    Args:
        x: A tensor of any shape and floating dtype.
        buckets: The number of buckets, a Python int >= 1.

    Returns:
        `(counts, value_range)`: an int32 vector of length `buckets` and a
        float32 vector `[min, max]` of the finite elements (both 0 when there
        are none). Bucket `i` spans `min + i * (max - min) / buckets` to
        `min + (i + 1) * (max - min) / buckets`.

    Example:

    >>> counts, value_range = bucket_counts(tf.constant([0.0, 1.0, 1.0]), 2)
    >>> counts.numpy().tolist(), value_range.numpy().tolist()
    ([1, 2], [0.0, 1.0])
    """
    if isinstance(x, tf.IndexedSlices):
        x = tf.convert_to_tensor(x)
    dtype = tf.float64 if x.dtype == tf.float64 else tf.float32
    x = tf.reshape(tf.cast(x, dtype), [-1])
    finite = tf.math.is_finite(x)
    inf = tf.constant(float("inf"), dtype)
    low = tf.reduce_min(tf.where(finite, x, inf))
    high = tf.reduce_max(tf.where(finite, x, -inf))
    has_finite = tf.reduce_any(finite)
    low = tf.where(has_finite, low, tf.zeros_like(low))
    high = tf.where(has_finite, high, tf.zeros_like(high))

    # Bucket on x / max|x| so that (x - low) cannot overflow near the limit.
    scale = tf.maximum(tf.abs(low), tf.abs(high))
    scale = tf.where(scale > 0, scale, tf.ones_like(scale))
    offset = tf.where(finite, x, low) / scale - low / scale
    width = high / scale - low / scale
    position = tf.math.divide_no_nan(offset, width) * buckets
    index = tf.where(
        width > 0,
        tf.cast(tf.minimum(tf.floor(position), buckets - 1), tf.int32),
        tf.fill(tf.shape(x), buckets - 1),
    )
    # Non-finite elements go to an extra segment that is dropped.
    index = tf.where(finite, index, tf.fill(tf.shape(x), buckets))
    counts = tf.math.unsorted_segment_sum(
        tf.ones_like(index), index, num_segments=buckets + 1
    )[:buckets]
    return counts, tf.cast(tf.stack([low, high]), tf.float32)
