"""TensorBoard's histogram format, `[k, 3]` rows of (left, right, count),
from the bucket counts and value range the monitor records (see
`keras_gradmon.stats.histogram` for the bucket convention). The host
version needs no TensorFlow; the graph one imports it when called."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf


def histogram_rows(counts: np.ndarray, value_range: np.ndarray) -> np.ndarray:
    """`[k, 3]` float64 rows `(left, right, count)` on the host.

    Example:

    >>> histogram_rows(np.array([1, 2]), np.array([0.0, 1.0])).tolist()
    [[0.0, 0.5, 1.0], [0.5, 1.0, 2.0]]
    """
    k = len(counts)
    low, high = (float(v) for v in value_range)
    if not (math.isfinite(low) and math.isfinite(high)):
        low = high = 0.0
    edges = low + (high - low) * np.arange(k + 1, dtype=np.float64) / k
    edges[-1] = high
    return np.stack([edges[:-1], edges[1:], counts.astype(np.float64)], axis=1)


def histogram_rows_graph(counts: tf.Tensor, value_range: tf.Tensor) -> tf.Tensor:
    """The graph version of `histogram_rows`, for summaries written in-graph.

    Example:

    >>> import tensorflow as tf
    >>> histogram_rows_graph(tf.constant([1, 2]), tf.constant([0.0, 1.0])).numpy()
    array([[0. , 0.5, 1. ],
           [0.5, 1. , 2. ]])
    """
    return batched_histogram_rows_graph(counts[None], value_range[None])[0]


def batched_histogram_rows_graph(
    counts: tf.Tensor, value_ranges: tf.Tensor
) -> tf.Tensor:
    """`[n, k, 3]` float64 rows of `n` histograms at once, from `[n, k]`
    bucket counts and `[n, 2]` value ranges (each as `histogram_rows`).

    Example:

    >>> import tensorflow as tf
    >>> rows = batched_histogram_rows_graph(
    ...     tf.constant([[1, 2]]), tf.constant([[0.0, 1.0]]))
    >>> rows.numpy()[0, :, 1].tolist()
    [0.5, 1.0]
    """
    import tensorflow as tf

    k = int(counts.shape[1])
    value_ranges = tf.cast(value_ranges, tf.float64)
    finite = tf.reduce_all(tf.math.is_finite(value_ranges), axis=1, keepdims=True)
    value_ranges = tf.where(finite, value_ranges, tf.zeros_like(value_ranges))
    low, high = value_ranges[:, :1], value_ranges[:, 1:]
    edges = low + (high - low) * tf.range(k + 1, dtype=tf.float64) / k
    edges = tf.concat([edges[:, :-1], high], 1)
    counts = tf.cast(counts, tf.float64)
    return tf.stack([edges[:, :-1], edges[:, 1:], counts], axis=2)
