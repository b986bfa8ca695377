"""TensorFlow's gradients that are not one dense tensor of static shape: a
`tf.IndexedSlices` (an `Embedding`'s gradient) and shapes known only at run
time. Imported by `_gradients` only on the TensorFlow backend."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

__all__ = ["as_gradient", "map_values", "with_static_shape"]


def as_gradient(g: object) -> tf.Tensor | tf.IndexedSlices:
    """`g` as a tensor; a `tf.IndexedSlices` is kept as it is.

    Example:

    >>> as_gradient([1.0, 2.0]).dtype
    tf.float32
    """
    return g if isinstance(g, tf.IndexedSlices) else tf.convert_to_tensor(g)


def map_values(
    g: tf.Tensor | tf.IndexedSlices, fn: Callable[[tf.Tensor], tf.Tensor]
) -> tf.Tensor | tf.IndexedSlices:
    """`fn(g)`; for a `tf.IndexedSlices`, the same slices with `fn(values)`.

    Example:

    >>> s = tf.IndexedSlices(tf.ones([1, 2]), [1], [3, 2])
    >>> map_values(s, lambda v: v * 2.0).values.numpy().tolist()
    [[2.0, 2.0]]
    """
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(fn(g.values), g.indices, g.dense_shape)
    return fn(g)


def with_static_shape(g: tf.Tensor, shape: tf.TensorShape) -> tf.Tensor:
    """Dense `g` with the static `shape` where its own is known only at run
    time (an `Embedding`'s densified gradient inside a `tf.function`).

    Example:

    >>> with_static_shape(tf.ones([2]), tf.TensorShape([2])).shape
    TensorShape([2])
    """
    if g.shape.is_fully_defined():
        return g
    return tf.ensure_shape(g, shape)
