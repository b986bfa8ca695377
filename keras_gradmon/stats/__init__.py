"""Pure, XLA-safe statistic functions.

Everything here is plain tensor math: no `tf.summary`, no string ops, no
Python control flow on tensor values, so it compiles under
`tf.function(jit_compile=True)`.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from keras_gradmon.stats.histogram import bucket_counts
from keras_gradmon.stats.moments import (
    STATISTICS,
    stack_statistics,
    tensor_statistics,
)
from keras_gradmon.stats.norms import combine_norms


def batched_statistics(
    tensors: Sequence[tf.Tensor], names: Sequence[str] = STATISTICS
) -> tf.Tensor:
    """TEMPORARY per-tensor stand-in: `[len(tensors), len(STATISTICS)]`."""
    if not tensors:
        return tf.zeros([0, len(STATISTICS)])
    return tf.stack([stack_statistics(t, names) for t in tensors])


def batched_bucket_counts(
    tensors: Sequence[tf.Tensor], buckets: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """TEMPORARY per-tensor stand-in: `(counts [V, buckets], ranges [V, 2])`."""
    if not tensors:
        return tf.zeros([0, buckets], tf.int32), tf.zeros([0, 2])
    pairs = [bucket_counts(t, buckets) for t in tensors]
    return tf.stack([c for c, _ in pairs]), tf.stack([r for _, r in pairs])


__all__ = [
    "STATISTICS",
    "batched_bucket_counts",
    "batched_statistics",
    "bucket_counts",
    "combine_norms",
    "stack_statistics",
    "tensor_statistics",
]
