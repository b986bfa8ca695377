"""Per-tensor statistics: norm, moments, extremes, sparsity, finiteness.

The statistics describe the *finite* elements of a tensor; NaN and Inf
elements are counted in `nonfinite` instead of silently turning every other
number into NaN. Computation happens in float32 (float64 for float64 input)
and is scaled by the largest magnitude, so values near the float32 limit
(1e30) do not overflow when squared and tiny values (1e-30) do not underflow.
"""

from __future__ import annotations

import tensorflow as tf

#: The statistics computed for every tensor, in storage order.
STATISTICS: tuple[str, ...] = (
    "norm",
    "mean",
    "std",
    "min",
    "max",
    "max_abs",
    "zero_fraction",
    "nonfinite",
)


def _compute_dtype(dtype: tf.DType) -> tf.DType:
    return tf.float64 if dtype == tf.float64 else tf.float32


def tensor_statistics(x: tf.Tensor) -> dict[str, tf.Tensor]:
    """Statistics of all elements of `x`, as scalar tensors.

    Args:
        x: A tensor of any shape and floating dtype (float16, bfloat16,
            float32, float64). `tf.IndexedSlices` are densified first.

    Returns:
        A dict from each name in `STATISTICS` to a scalar float tensor
        (float64 for float64 input, else float32). `mean`, `std`, `min`
        and `max` are NaN when `x` has no finite element; `norm` and
        `max_abs` are then 0.

    Example:

    >>> s = tensor_statistics(tf.constant([3.0, -4.0, 0.0, float("nan")]))
    >>> float(s["norm"]), float(s["nonfinite"]), float(s["zero_fraction"])
    (5.0, 1.0, 0.25)
    """
    if isinstance(x, tf.IndexedSlices):
        x = tf.convert_to_tensor(x)
    dtype = _compute_dtype(x.dtype)
    x = tf.reshape(tf.cast(x, dtype), [-1])
    finite = tf.math.is_finite(x)
    size = tf.cast(tf.size(x), dtype)
    count = tf.reduce_sum(tf.cast(finite, dtype))
    safe_count = tf.maximum(count, 1.0)
    inf = tf.constant(float("inf"), dtype)

    x_finite = tf.where(finite, x, tf.zeros_like(x))
    # reduce_max of an empty tensor is -inf; the maximum with 0 covers it.
    max_abs = tf.maximum(tf.reduce_max(tf.abs(x_finite)), 0.0)
    # Work on x / max|x| (in [-1, 1]) so squares neither overflow nor underflow.
    scale = tf.where(max_abs > 0, max_abs, tf.ones_like(max_abs))
    y = x_finite / scale
    norm = scale * tf.sqrt(tf.reduce_sum(tf.square(y)))
    mean_y = tf.reduce_sum(y) / safe_count
    # Two-pass variance: accurate when |mean| >> std, unlike E[y^2] - E[y]^2.
    deviation = tf.where(finite, y - mean_y, tf.zeros_like(y))
    std = scale * tf.sqrt(tf.reduce_sum(tf.square(deviation)) / safe_count)

    minimum = tf.reduce_min(tf.where(finite, x, inf))
    maximum = tf.reduce_max(tf.where(finite, x, -inf))
    zeros = tf.reduce_sum(tf.cast(tf.equal(x, 0.0), dtype))

    has_finite = count > 0
    nan = tf.constant(float("nan"), dtype)
    return {
        "norm": norm,
        "mean": tf.where(has_finite, scale * mean_y, nan),
        "std": tf.where(has_finite, std, nan),
        "min": tf.where(has_finite, minimum, nan),
        "max": tf.where(has_finite, maximum, nan),
        "max_abs": max_abs,
        "zero_fraction": zeros / tf.maximum(size, 1.0),
        "nonfinite": size - count,
    }


def stack_statistics(x: tf.Tensor) -> tf.Tensor:
    """`tensor_statistics(x)` as a float32 vector in `STATISTICS` order.

    Example:

    >>> stack_statistics(tf.ones([4])).shape
    TensorShape([8])
    """
    stats = tensor_statistics(x)
    return tf.stack([tf.cast(stats[name], tf.float32) for name in STATISTICS])
