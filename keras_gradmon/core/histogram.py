"""Histogram bucket counts with plain ops (`tf.histogram_fixed_width` and
`tf.summary.histogram` do not compile under XLA).

Buckets follow TensorBoard's own convention (`tf.summary.histogram`): `k`
equal-width buckets spanning [min, max] of the finite elements, the last one
closed on the right; when all finite values are equal, every element lands in
the last bucket. Non-finite elements are left out (they are counted by the
`nonfinite` statistic). TensorBoard's `[k, 3]` rows are made from them on
the host (`keras_gradmon.columns.histogram_rows`) or, for summaries written
in-graph, by `keras_gradmon.legacy.graph_writer`; the activation
histograms' rows by `readable_rows`, whose edges have few digits.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from keras import ops

from keras_gradmon import backend
from keras_gradmon.backend import Tensor
from keras_gradmon.core.batched import compute_dtype

if TYPE_CHECKING:
    pass


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


#: The fewest significant digits of a readable bucket edge.
EDGE_DIGITS = 3


def readable_rows(counts: Any, value_range: Any) -> np.ndarray:
    """TensorBoard's `[k, 3]` float64 rows `(left, right, count)` of
    `bucket_counts`' output, with edges short enough to read on an axis.

    The edges split the finite range into `k` equal buckets as
    `bucket_counts` did, each then rounded to the fewest significant digits
    (3 at least) at which none moves by more than a tenth of a bucket, the
    first rounded down and the last up, so they still hold the smallest and
    the largest value; the counts are kept. When every finite value is
    equal (or there is none), the range is that value +- half its order of
    magnitude (+- 0.5 below 1) and the count sits in the middle bucket.
    Non-finite values are in no bucket: the `nonfinite` statistic counts
    them.

    Example:

    >>> readable_rows(np.array([1, 2]), np.array([6.0, 1.8e31])).tolist()
    [[6.0, 9e+30, 1.0], [9e+30, 1.8e+31, 2.0]]
    """
    counts = np.asarray(counts, dtype=np.float64)
    k = len(counts)
    low, high = (float(v) for v in np.asarray(value_range, dtype=np.float64))
    if not (math.isfinite(low) and math.isfinite(high)):
        low = high = 0.0
    if high <= low:
        magnitude = 10.0 ** math.floor(math.log10(abs(low))) if abs(low) >= 1 else 1
        low, high = low - magnitude / 2, low + magnitude / 2
        middle = np.zeros_like(counts)
        middle[k // 2] = counts.sum()
        counts = middle
    edges = low + (high - low) * (np.arange(k + 1, dtype=np.float64) / k)
    edges[0], edges[-1] = low, high
    edges = _short_edges(edges)
    return np.stack([edges[:-1], edges[1:], counts], axis=1)


def _short_edges(edges: np.ndarray) -> np.ndarray:
    """`edges` (equal buckets) at the fewest significant digits (at least
    `EDGE_DIGITS`) at which none moves by more than a tenth of a bucket, the
    outer ones rounded outward."""
    tolerance = 0.1 * (edges[-1] - edges[0]) / (len(edges) - 1)
    for digits in range(EDGE_DIGITS, 18):
        rounded = np.array([_round(e, digits, round) for e in edges])
        rounded[0] = _round(edges[0], digits, math.floor)
        rounded[-1] = _round(edges[-1], digits, math.ceil)
        if np.all(np.abs(rounded - edges) <= tolerance):
            return rounded
    return edges


def _round(value: float, digits: int, how: Any) -> float:
    """`value` at `digits` significant digits, rounded by `how`."""
    if value == 0 or not math.isfinite(value):
        return value
    unit = 10.0 ** (math.floor(math.log10(abs(value))) - digits + 1)
    if unit == 0 or not math.isfinite(unit):
        return value
    return float(f"{how(value / unit) * unit:.{digits + 1}g}")
