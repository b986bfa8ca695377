"""How `batched.py` lays tensors out: one NaN-padded `[blocks, block]` matrix.

Tensors of static shape share one layout of NumPy constants, so the program
does not grow with their number. Tensors whose size is known only at run
time (an `Embedding`'s `tf.IndexedSlices` passed into a `tf.function`, an
`input_signature` of unknown dims) share one layout of the same values
computed with tensors (`dynamic_layout`, the mirror of `static_layout`).
`by_layout` computes a batched result for each group and puts its rows back
in the input order.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

_MIN_BLOCK, _MAX_BLOCK = 64, 2048
# The block sizes above the smallest: the dynamic layout counts those at most
# its target (an exact log2, rounded down, without floats).
_BLOCKS = np.array([128, 256, 512, 1024, _MAX_BLOCK], "i4")

#: `count` tensors; the block size; per tensor its size, NaN padding and the
#: flat positions of 3 shift candidates; per block its tensor (`count`: the
#: spare all-NaN block). NumPy values (static) or int32 tensors (dynamic).
Layout = namedtuple(
    "Layout", ["count", "block", "sizes", "pads", "samples", "segments"]
)


def static_layout(sizes: Sequence[int]) -> Layout:
    """The layout of tensors of static `sizes`: padding below ~25%."""
    sizes = np.asarray(sizes, np.int64)
    target = max(int(sizes.sum()) // (4 * len(sizes)), 1)
    block = int(min(max(2 ** int(np.log2(target)), _MIN_BLOCK), _MAX_BLOCK))
    per = -(-sizes // block)
    start = np.concatenate([[0], np.cumsum(per)[:-1]]) * block
    samples = np.stack([start, start + sizes // 2, start + np.maximum(sizes - 1, 0)], 1)
    samples[sizes == 0] = per.sum() * block  # in the spare all-NaN block
    segments = np.append(np.repeat(np.arange(len(sizes)), per), len(sizes))
    pads = (per * block - sizes).astype("i4")
    return Layout(len(sizes), block, sizes, pads, samples, segments.astype("i4"))


def dynamic_layout(sizes: Sequence[tf.Tensor]) -> Layout:
    """`static_layout` of sizes known at run time (int32 scalar tensors)."""
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


def densify(t: tf.Tensor | tf.IndexedSlices) -> tf.Tensor:
    """`t` as a dense tensor: `tf.IndexedSlices` with duplicates summed,
    keeping a static dense shape where there is one."""
    if not isinstance(t, tf.IndexedSlices):
        return tf.convert_to_tensor(t)
    shape = tf.get_static_value(t.dense_shape)
    dense = tf.convert_to_tensor(t)
    return dense if shape is None else tf.reshape(dense, shape)


def prepare(tensors: Sequence[tf.Tensor]) -> tuple[tf.Tensor, Layout]:
    """The dense `tensors` as one NaN-padded `[blocks, block]` matrix (float32,
    float64 if any is), with a spare all-NaN block, and its layout."""
    sizes = [t.shape.num_elements() for t in tensors]
    if None in sizes:
        layout = dynamic_layout([tf.size(t) for t in tensors])
    else:
        layout = static_layout(sizes)
    dtype = tf.float64 if any(t.dtype == tf.float64 for t in tensors) else tf.float32
    nan, parts = tf.constant(float("nan"), dtype), []
    for i, t in enumerate(tensors):
        # Constants, not tf.pad: XLA then concatenates with plain copies.
        pad = layout.pads[i]
        pad = int(pad) if isinstance(pad, np.integer) else pad
        parts += [tf.reshape(tf.cast(t, dtype), [-1]), tf.fill([pad], nan)]
    parts.append(tf.fill([layout.block], nan))
    return tf.reshape(tf.concat(parts, 0), [-1, layout.block]), layout


def by_layout(
    tensors: Sequence[tf.Tensor | tf.IndexedSlices],
    compute: Callable[[tf.Tensor, Layout], tuple[tf.Tensor, ...]],
) -> tuple[tf.Tensor, ...]:
    """`compute(matrix, layout)` of the tensors of static size together and
    of the others together, rows back in the order of `tensors`.

    Args:
        tensors: Floating tensors or `tf.IndexedSlices` (densified), at
            least one.
        compute: Returns tensors whose row `i` belongs to tensor `i` of the
            layout.
    """
    dense = [densify(t) for t in tensors]
    known = [t.shape.num_elements() is not None for t in dense]
    groups = [[i for i, k in enumerate(known) if k == want] for want in (True, False)]
    groups = [g for g in groups if g]
    results = [compute(*prepare([dense[i] for i in g])) for g in groups]
    if len(results) == 1:
        return results[0]
    order = np.argsort(np.concatenate(groups)).astype("i4")
    return tuple(tf.gather(tf.concat(parts, 0), order) for parts in zip(*results))
