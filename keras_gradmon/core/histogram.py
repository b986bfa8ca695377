"""Histogram bucket counts with plain ops (`tf.histogram_fixed_width` and
`tf.summary.histogram` do not compile under XLA).

Buckets follow TensorBoard's own convention (`tf.summary.histogram`): `k`
equal-width buckets spanning [min, max] of the finite elements, the last one
closed on the right; when all finite values are equal, every element lands in
the last bucket. Non-finite elements are left out (they are counted by the
`nonfinite` statistic). TensorBoard's `[k, 3]` rows, with readable edges,
are made from them by `keras_gradmon.histogram_rows.readable_rows`: on the host
(`histogram_rows`) or, for summaries written in-graph, in TensorFlow ops
(`keras_gradmon.legacy.graph_writer`).
"""

from __future__ import annotations

from typing import Any

from keras import ops

from keras_gradmon import backend
from keras_gradmon.backend import Tensor
from keras_gradmon.core.batched import compute_dtype


def bucket_counts(x: Any, buckets: int) -> tuple[Tensor, Tensor]:
    """Counts of the finite elements of `x` in `buckets` equal-width buckets.

    Args:
        x: A tensor of any shape and floating dtype (a `tf.IndexedSlices`
            counts as its dense tensor).
        buckets: The number of buckets, a Python int >= 1.

    Returns:
        `(counts, value_range)`: an int32 vector of length `buckets` and a
        float32 vector `[min, max]` of the finite elements (both 0 when there
        are none). Bucket `i` spans `min + i * (max - min) / buckets` to
        `min + (i + 1) * (max - min) / buckets`.

    Example:

    >>> import numpy as np
    >>> counts, value_range = bucket_counts(np.array([0.0, 1.0, 1.0], "f4"), 2)
    >>> np.asarray(counts).tolist(), np.asarray(value_range).tolist()
    ([1, 2], [0.0, 1.0])
    """
    x = backend.densify(x)
    x = ops.reshape(ops.cast(x, compute_dtype([x])), [-1])
    finite = ops.isfinite(x)
    inf = float("inf")
    # `initial`: an empty x has the extremes +-inf, as TensorFlow's reductions.
    low = ops.min(ops.where(finite, x, inf), initial=inf)
    high = ops.max(ops.where(finite, x, -inf), initial=-inf)
    has_finite = ops.any(finite)
    low = ops.where(has_finite, low, ops.zeros_like(low))
    high = ops.where(has_finite, high, ops.zeros_like(high))

    # Bucket on x / max|x| so that (x - low) cannot overflow near the limit.
    scale = ops.maximum(ops.abs(low), ops.abs(high))
    scale = ops.where(scale > 0, scale, ops.ones_like(scale))
    offset = backend.divide(ops.where(finite, x, low), scale) - low / scale
    width = high / scale - low / scale
    position = backend.divide(offset, ops.where(width > 0, width, 1.0)) * buckets
    # The first and last buckets take what rounding puts (just) outside.
    position = ops.clip(ops.floor(position), 0.0, buckets - 1)
    index = ops.where(
        width > 0,
        ops.cast(position, "int32"),
        ops.full_like(x, buckets - 1, "int32"),
    )
    # Non-finite elements go to an extra segment that is dropped.
    index = ops.where(finite, index, ops.full_like(x, buckets, "int32"))
    counts = ops.segment_sum(ops.ones_like(index), index, num_segments=buckets + 1)
    return counts[:buckets], ops.cast(ops.stack([low, high]), "float32")
