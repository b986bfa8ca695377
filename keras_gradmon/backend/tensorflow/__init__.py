"""The TensorFlow backend: `graph.gate` (a functional conditional, so the
untaken branch costs nothing in a graph without XLA), `tf.IndexedSlices`,
and tensors whose shape is known only at run time (an `Embedding`'s
gradient passed into a `tf.function`, an `input_signature` of unknown dims):
their layout is `static_layout`'s, computed with tensors."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_gradmon.backend.tensorflow.graph import exact_copies, run_if
from keras_gradmon.backend.tensorflow.graph import gate as cond
from keras_gradmon.stats.layout import _BLOCKS, _MIN_BLOCK, Layout

__all__ = ["bincount", "cond", "densify", "dynamic_layout", "dynamic_matrix"]


def densify(t: tf.Tensor | tf.IndexedSlices) -> tf.Tensor:
    """`t` as a dense tensor: `tf.IndexedSlices` with duplicates summed,
    keeping a static dense shape where there is one.

    Example:

    >>> densify(tf.IndexedSlices(tf.ones([2, 1]), [0, 0], [2, 1])).numpy().tolist()
    [[2.0], [0.0]]
    """
    if not isinstance(t, tf.IndexedSlices):
        return tf.convert_to_tensor(t)
    shape = tf.get_static_value(t.dense_shape)
    dense = tf.convert_to_tensor(t)
    return dense if shape is None else tf.reshape(dense, shape)


def num_elements(t: tf.Tensor) -> int | None:
    """`t.shape.num_elements()`: None when known only at run time."""
    return t.shape.num_elements()


def dynamic_layout(sizes: Sequence[tf.Tensor]) -> Layout:
    """`static_layout` of sizes known at run time (int32 scalar tensors).

    Example:

    >>> int(dynamic_layout([tf.constant(5)]).block)
    64
    """
    count = len(sizes)
    sizes = tf.cast(tf.stack(sizes), tf.int32)
    target = tf.maximum(tf.reduce_sum(sizes) // (4 * count), 1)
    steps = tf.reduce_sum(tf.cast(target >= _BLOCKS, tf.int32))
    block = _MIN_BLOCK * tf.bitwise.left_shift(1, steps)
    per = -(-sizes // block)
    start = (tf.cumsum(per) - per) * block
    samples = tf.stack([start, start + sizes // 2, start + tf.maximum(sizes - 1, 0)], 1)
    spare = tf.fill(tf.shape(samples), tf.reduce_sum(per) * block)
    samples = tf.where(sizes[:, None] == 0, spare, samples)
    segments = tf.concat([tf.repeat(tf.range(count), per), [count]], 0)
    return Layout(count, block, sizes, per * block - sizes, samples, segments)


def dynamic_matrix(
    tensors: Sequence[tf.Tensor], dtype: str
) -> tuple[tf.Tensor, Layout]:
    """The dense `tensors` as one NaN-padded `[blocks, block]` matrix of
    `dtype`, with a spare all-NaN block, laid out at run time.

    Example:

    >>> dynamic_matrix([tf.ones([3])], "float32")[0].shape  # doctest: +SKIP
    TensorShape([2, 64])
    """
    layout = dynamic_layout([tf.size(t) for t in tensors])
    nan, parts = tf.constant(float("nan"), dtype), []
    for i, t in enumerate(tensors):
        # Constants, not tf.pad: XLA then concatenates with plain copies.
        parts += [tf.reshape(tf.cast(t, dtype), [-1]), tf.fill([layout.pads[i]], nan)]
    parts.append(tf.fill([layout.block], nan))
    return tf.reshape(tf.concat(parts, 0), [-1, layout.block]), layout


def bincount(index: tf.Tensor, size: int) -> tf.Tensor:
    """Occurrences of `0 .. size - 1` in `index` (int32), with an op XLA
    compiles.

    Example:

    >>> bincount(tf.constant([0, 2, 2]), 3).numpy().tolist()
    [1, 0, 2]
    """
    return tf.raw_ops.DenseBincount(input=index, size=size, weights=np.zeros(0, "i4"))


def global_norm(values: Sequence[tf.Tensor]) -> tf.Tensor:
    """`tf.linalg.global_norm(values)`.

    Example:

    >>> float(global_norm([tf.constant([3.0]), tf.constant([4.0])]))
    5.0
    """
    return tf.linalg.global_norm(values)


def divide(x: tf.Tensor, divisor: tf.Tensor) -> tf.Tensor:
    """`x / divisor`."""
    return x / divisor


def wide_float() -> str:
    """float64."""
    return "float64"


def state_dtype(dtype: str) -> str:
    """`dtype` itself: TensorFlow has every dtype."""
    return dtype


def update_if(pred: tf.Tensor, fn, store) -> None:
    """`fn`'s results assigned inside the taken branch of `graph.run_if`."""
    run_if(pred, lambda: store.write(fn(store.read())))


def capture(variables, source, cache: dict) -> tuple:
    """Raw eager reads of `variables` (`reading.Reader`, cached by id)."""
    from keras_gradmon.backend.tensorflow.reading import Reader

    readers = [cache.setdefault(id(v), Reader(v)) for v in variables]
    return tuple(read() for read in readers)


def barrier(values: list, zero: tf.Tensor) -> list:
    """`graph.exact_copies`."""
    return exact_copies(values, zero)
