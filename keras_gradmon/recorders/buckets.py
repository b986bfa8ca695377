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
    import tensorflow as tf

    k = int(counts.shape[0])
    value_range = tf.cast(value_range, tf.float64)
    finite = tf.reduce_all(tf.math.is_finite(value_range))
    value_range = tf.where(finite, value_range, tf.zeros_like(value_range))
    low, high = value_range[0], value_range[1]
    edges = low + (high - low) * tf.range(k + 1, dtype=tf.float64) / k
    edges = tf.concat([edges[:-1], [high]], 0)
    return tf.stack([edges[:-1], edges[1:], tf.cast(counts, tf.float64)], axis=1)
