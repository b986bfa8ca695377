"""Combining L2 norms of several tensors into the norm of all their elements."""

from __future__ import annotations

import tensorflow as tf


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
