"""How `batched.py` lays tensors out: one NaN-padded `[blocks, block]` matrix.

Tensors of static shape share one layout of NumPy constants, so the program
does not grow with their number. Tensors whose size is known only at run
time (TensorFlow only: an `Embedding`'s `tf.IndexedSlices` passed into a
`tf.function`, an `input_signature` of unknown dims) share one layout of the
same values computed with tensors (`backend.tensorflow.dynamic_layout`, the
mirror of `static_layout`). `by_layout` computes a batched result for each
group and puts its rows back in the input order.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from keras import backend as keras_backend
from keras import ops

from keras_gradmon import backend
from keras_gradmon.backend import Tensor, densify

__all__ = ["Layout", "by_layout", "densify", "prepare", "static_layout"]

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
    """The layout of tensors of static `sizes`: padding below ~25%.

    Example:

    >>> static_layout([3, 100]).block, static_layout([3, 100]).segments.tolist()
    (64, [0, 1, 1, 2])
    """
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


def compute_dtype(tensors: Sequence[Tensor]) -> str:
    """float64 if any of `tensors` is, else float32.

    Example:

    >>> compute_dtype([np.ones(2, "f2"), np.ones(1, "f4")])
    'float32'
    """
    dtypes = {keras_backend.standardize_dtype(t.dtype) for t in tensors}
    return "float64" if "float64" in dtypes else "float32"


def prepare(tensors: Sequence[Tensor]) -> tuple[Tensor, Layout]:
    """The dense `tensors` as one NaN-padded `[blocks, block]` matrix (float32,
    float64 if any is), with a spare all-NaN block, and its layout.

    Example:

    >>> matrix, layout = prepare([ops.ones([3]), ops.ones([100])])
    >>> tuple(matrix.shape), layout.count
    ((4, 64), 2)
    """
    dtype = compute_dtype(tensors)
    sizes = [backend.num_elements(t) for t in tensors]
    if None in sizes:
        return backend.dynamic_matrix(tensors, dtype)
    layout = static_layout(sizes)
    nan, parts = ops.convert_to_tensor(float("nan"), dtype), []
    for t, pad in zip(tensors, layout.pads):
        # Constants, not a pad op: XLA then concatenates with plain copies.
        padding = ops.broadcast_to(nan, [int(pad)])
        parts += [ops.reshape(ops.cast(t, dtype), [-1]), padding]
    parts.append(ops.broadcast_to(nan, [layout.block]))
    return ops.reshape(ops.concatenate(parts, 0), [-1, layout.block]), layout


def by_layout(
    tensors: Sequence[Any],
    compute: Callable[[Tensor, Layout], tuple[Tensor, ...]],
) -> tuple[Tensor, ...]:
    """`compute(matrix, layout)` of the tensors of static size together and
    of the others together, rows back in the order of `tensors`.

    Args:
        tensors: Floating tensors or `tf.IndexedSlices` (densified), at
            least one.
        compute: Returns tensors whose row `i` belongs to tensor `i` of the
            layout.

    Example:

    >>> [sizes] = by_layout([ops.ones([3])], lambda x, layout: (layout.sizes,))
    >>> sizes.tolist()
    [3]
    """
    dense = [densify(t) for t in tensors]
    known = [backend.num_elements(t) is not None for t in dense]
    groups = [[i for i, k in enumerate(known) if k == want] for want in (True, False)]
    groups = [g for g in groups if g]
    results = [compute(*prepare([dense[i] for i in g])) for g in groups]
    if len(results) == 1:
        return results[0]
    order = np.argsort(np.concatenate(groups)).astype("i4")
    return tuple(
        ops.take(ops.concatenate(parts, 0), order, 0) for parts in zip(*results)
    )


def __getattr__(name: str) -> Any:
    """`dynamic_layout`, TensorFlow's, imported from its backend on first use."""
    if name == "dynamic_layout":
        from keras_gradmon.backend import tensorflow

        return tensorflow.dynamic_layout
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
