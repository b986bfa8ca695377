"""Statistics of many tensors at once, in a program that does not grow with
their number, written in `keras.ops` (the same on every Keras backend; what
differs is in `keras_gradmon.backend`); no `tf.summary`, no string ops, no
Python control flow on tensor values, so it compiles under XLA.

- The layout: the tensors, padded with NaN (ignored like every non-finite
  element) to whole blocks, form one `[blocks, block]` matrix
  (`static_layout`, a `BlockLayout` of NumPy constants; tensors whose size
  is known only at run time share a second matrix whose layout the
  TensorFlow backend computes with tensors, `dynamic_layout`). With
  `unpack_large` (`keras_gradmon.backend.unmasked_pays`), a large tensor
  (`layout_groups`) is a matrix of its own instead, reshaped, not copied
  (`prepare_alone`), and its first pass takes no mask (`_alone_statistics`).
- The shared pass (`Reductions`): reduced by rows, then by tensor with
  segment ids, in float32 (float64 if any tensor is), it takes the counts
  and the reductions the requested statistics need
  (`keras_gradmon.core.statistics`), sums around a shift against
  cancellation; each statistic finishes its value from them, and one
  conditional recomputes, scaled and in two passes (`Careful`), the rows
  that pass cannot be trusted with. Derived values are computed on first
  use, so a statistic only costs what it reads.
- The one-tensor case (`tensor_statistics`): statistics of the finite
  elements, NaN and Inf counted in `nonfinite` instead of turning every
  other number into NaN, right near the float32 limit and for tiny values.
- L2 norms of many tensors together (`batched_global_norm`,
  `combine_norms`): from their elements (overflow-safe), or from their own
  norms.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from keras import backend as keras_backend
from keras import ops

from keras_gradmon import backend
from keras_gradmon.backend import Tensor, densify
from keras_gradmon.columns import STATISTICS
from keras_gradmon.core import statistics as registry
from keras_gradmon.core.statistics import Statistic

_MIN_BLOCK, _MAX_BLOCK = 64, 2048
# The block sizes above the smallest: the dynamic layout counts those at most
# its target (an exact log2, rounded down, without floats).
_BLOCKS = np.array([128, 256, 512, 1024, _MAX_BLOCK], "i4")

#: `count` tensors; the block size; per tensor its size, NaN padding and the
#: flat positions of 3 shift candidates; per block its tensor (`count`: the
#: spare all-NaN block). NumPy values (static) or int32 tensors (dynamic).
BlockLayout = namedtuple(
    "BlockLayout", ["count", "block", "sizes", "pads", "samples", "segments"]
)


def static_layout(sizes: Sequence[int]) -> BlockLayout:
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
    return BlockLayout(len(sizes), block, sizes, pads, samples, segments.astype("i4"))


def compute_dtype(tensors: Sequence[Tensor]) -> str:
    """float64 if any of `tensors` is, else float32.

    Example:

    >>> compute_dtype([np.ones(2, "f2"), np.ones(1, "f4")])
    'float32'
    """
    dtypes = {keras_backend.standardize_dtype(t.dtype) for t in tensors}
    return "float64" if "float64" in dtypes else "float32"


def prepare(
    tensors: Sequence[Tensor], dtype: str | None = None
) -> tuple[Tensor, BlockLayout]:
    """The dense `tensors` as one NaN-padded `[blocks, block]` matrix (in
    `dtype`, by default float32, float64 if any is), with a spare all-NaN
    block, and its layout.

    Example:

    >>> matrix, layout = prepare([ops.ones([3]), ops.ones([100])])
    >>> tuple(matrix.shape), layout.count
    ((4, 64), 2)
    """
    dtype = dtype or compute_dtype(tensors)
    sizes = [backend.num_elements(t) for t in tensors]
    if None in sizes:
        matrix, fields = backend.dynamic_matrix(tensors, dtype, _BLOCKS, _MIN_BLOCK)
        return matrix, BlockLayout(*fields)
    layout = static_layout(sizes)
    nan, parts = ops.convert_to_tensor(float("nan"), dtype), []
    # Constants, not a pad op: XLA then concatenates with plain copies. One
    # for each length, and no op that changes nothing: a model's hundreds of
    # tensors would otherwise make as many ops to trace.
    lengths = {int(pad) for pad in layout.pads if pad}
    paddings = {length: ops.broadcast_to(nan, [length]) for length in lengths}
    for t, pad in zip(tensors, layout.pads):
        t = ops.cast(t, dtype)
        parts.append(t if len(t.shape) == 1 else ops.reshape(t, [-1]))
        if pad:
            parts.append(paddings[int(pad)])
    parts.append(ops.broadcast_to(nan, [layout.block]))
    return ops.reshape(ops.concatenate(parts, 0), [-1, layout.block]), layout


def alone_block(size: int | None) -> int | None:
    """The block of a tensor of `size` elements that is its own matrix: the
    largest power of 2 from 64 to 2048 dividing it, so that the matrix is
    the tensor reshaped, not copied; None if there is none (or no size).

    Example:

    >>> alone_block(512 * 512), alone_block(5120), alone_block(10)
    (2048, 1024, None)
    """
    if not size:
        return None
    block = int(np.gcd(size, _MAX_BLOCK))
    return block if block >= _MIN_BLOCK else None


def prepare_alone(tensor: Tensor, dtype: str) -> tuple[Tensor, BlockLayout]:
    """One tensor of a size `alone_block` divides, as its own `[blocks,
    block]` matrix: a reshape (and a cast if not in `dtype`), no padding and
    no spare block.

    Example:

    >>> matrix, layout = prepare_alone(ops.ones([8, 512]), "float32")
    >>> tuple(matrix.shape), layout.segments.tolist()
    ((2, 2048), [0, 0])
    """
    size = backend.num_elements(tensor)
    block = alone_block(size)
    samples = np.array([[0, size // 2, size - 1]], np.int64)
    segments = np.zeros(size // block, "i4")
    pads = np.zeros(1, "i4")
    layout = BlockLayout(1, block, np.array([size]), pads, samples, segments)
    return ops.reshape(ops.cast(tensor, dtype), [-1, block]), layout


def by_layout(
    tensors: Sequence[Any],
    compute: Callable[[Tensor, BlockLayout], tuple[Tensor, ...]],
    alone: Callable[[list, Callable[[], tuple]], tuple[Tensor, ...]] | None = None,
) -> tuple[Tensor, ...]:
    """`compute(matrix, layout)` of groups of the tensors, rows back in the
    order of `tensors`: the tensors of static size together, those of a
    size known only at run time together. With `alone`, the large tensors
    (`layout_groups`) are instead `alone(pieces, packed)`: `pieces` is the
    `prepare_alone` of each, `packed()` is `compute` of them packed.

    Args:
        tensors: Floating tensors or `tf.IndexedSlices` (densified), at
            least one.
        compute: Returns tensors whose row `i` belongs to tensor `i` of the
            layout.
        alone: Returns the same rows for the large tensors, in order.

    Example:

    >>> [sizes] = by_layout([ops.ones([3])], lambda x, layout: (layout.sizes,))
    >>> sizes.tolist()
    [3]
    """
    dense = [densify(t) for t in tensors]
    dtype = compute_dtype(dense)
    sizes = [backend.num_elements(t) for t in dense]
    lone, groups = layout_groups(sizes, unpack=alone is not None)
    results = [compute(*prepare([dense[i] for i in g], dtype)) for g in groups]
    if lone:
        lonely = [dense[i] for i in lone]
        pieces = [prepare_alone(t, dtype) for t in lonely]
        results.append(alone(pieces, lambda: compute(*prepare(lonely, dtype))))
    if len(results) == 1:
        return results[0]
    order = np.argsort(np.concatenate([*groups, lone]).astype("i4")).astype("i4")
    return tuple(
        ops.take(ops.concatenate(parts, 0), order, 0) for parts in zip(*results)
    )


#: A tensor of at least 1/_ALONE of all the elements is its own matrix.
_ALONE = 32


def layout_groups(
    sizes: Sequence[int | None], unpack: bool = True
) -> tuple[list[int], list[list[int]]]:
    """Which tensors of `sizes` (None: known only at run time) are their own
    matrix (none unless `unpack`), and the groups packed into one: those of
    static size, then the others. A tensor is alone when it holds at least
    1/32 of the elements and `alone_block` divides it: packing copies every
    element, so the large tensors, most of them, are reduced where they lie
    (at most 32 matrices, whatever the number of tensors).

    Example:

    >>> layout_groups([512 * 512, 10, 512, None])
    ([0], [[1, 2], [3]])
    """
    total = sum(s for s in sizes if s is not None)
    alone = [
        i
        for i, s in enumerate(sizes)
        if unpack and s is not None and s * _ALONE >= total and alone_block(s)
    ]
    rest = [i for i in range(len(sizes)) if i not in alone]
    groups = [
        [i for i in rest if sizes[i] is not None],
        [i for i in rest if sizes[i] is None],
    ]
    return alone, [g for g in groups if g]


def dynamic_layout(sizes: Sequence[Tensor]) -> BlockLayout:
    """`static_layout` of sizes known only at run time (int32 scalar
    tensors; TensorFlow only: on JAX every shape is static).

    Example:

    >>> int(dynamic_layout([tf.constant(5)]).block)  # doctest: +SKIP
    64
    """
    return BlockLayout(*backend.current().dynamic_layout(sizes, _BLOCKS, _MIN_BLOCK))


# A block sums 1 per zero, _NONFINITE per non-finite element: exact in float32.
_NONFINITE = 4096.0
# Sums of squares below _TINY smallest normal numbers may have lost terms.
_TINY = 1e8


def _segment_min(data: Tensor, segments: Any, num_segments: int) -> Tensor:
    return -ops.segment_max(-data, segments, num_segments=num_segments)


#: The plain reduction over the blocks of a one-tensor layout, for each
#: segment reduction `per_tensor` takes.
_ALONG_BLOCKS = {
    ops.segment_sum: ops.sum,
    ops.segment_max: ops.max,
    _segment_min: ops.min,
}


def per_tensor(partials: Tensor, layout: BlockLayout, op=ops.segment_sum) -> Tensor:
    """The per-block `partials` reduced by tensor with `op`. A static
    layout of one tensor (a large tensor alone, `prepare_alone`) is one
    plain reduction of its blocks: a segment reduction is a scatter, with a
    buffer to fill and copy first, three kernels where one does (on
    XLA:CPU each costs a few microseconds to launch, whatever its size)."""
    blocks, along = _one_tensor_blocks(layout), _ALONG_BLOCKS.get(op)
    if blocks and along is not None:
        return along(partials[:blocks], axis=0, keepdims=True)
    return op(partials, layout.segments, num_segments=layout.count + 1)[:-1]


def _one_tensor_blocks(layout: BlockLayout) -> int:
    """How many blocks the one tensor of a static one-tensor `layout`
    holds (the first ones: a spare block may follow); 0 for any other
    layout, or a tensor of no element."""
    if not isinstance(layout.segments, np.ndarray) or layout.count != 1:
        return 0  # a dynamic layout's fields are tensors
    return int(np.sum(layout.segments == 0))


def per_block(values: Tensor, layout: BlockLayout) -> Tensor:
    """The per-tensor `values` as a `[blocks, 1]` column (0 for the spare)."""
    return ops.take(ops.pad(values, [[0, 1]]), layout.segments, 0)[:, None]


def extremes(x: Tensor, finite: Tensor | None, layout: BlockLayout, k=None) -> tuple:
    """Min and max by tensor, non-finite elements replaced by k (or +-inf);
    `finite` None: of every element as it is."""
    inf = float("inf")
    low_x = high_x = x
    if finite is not None:
        low_x = ops.where(finite, x, inf if k is None else k)
        high_x = ops.where(finite, x, -inf if k is None else k)
    low = per_tensor(ops.min(low_x, axis=1), layout, _segment_min)
    return low, per_tensor(ops.max(high_x, axis=1), layout, ops.segment_max)


def _shift(x: Tensor, layout: BlockLayout) -> tuple[Tensor, Tensor]:
    """Median of the finite ones of 3 elements by tensor, and if there was one."""
    samples = ops.take(ops.reshape(x, [-1]), layout.samples)
    finite = ops.isfinite(samples)
    a, b, c = ops.unstack(ops.where(finite, samples, float("inf")), 3, axis=1)
    found = ops.sum(ops.cast(finite, "int32"), axis=1)
    # Sorted with the others last, the one at (found - 1) // 2: the least of
    # one or two finite ones, the median of three (no sort: elementwise).
    least = ops.minimum(ops.minimum(a, b), c)
    median = ops.maximum(ops.minimum(a, b), ops.minimum(ops.maximum(a, b), c))
    middle = ops.where(found == 3, median, least)
    return ops.where(found > 0, middle, ops.zeros_like(middle)), found > 0


def _counts(x: Tensor, finite: Tensor | None, layout: BlockLayout) -> tuple:
    """Finite (in x's dtype), non-finite and zero elements by tensor;
    `finite` None: every element taken as finite (`Reductions`)."""
    if finite is None:
        # 1 per non-zero element (NaN for NaN), without a compare and a cast,
        # which cost XLA:CPU a third more: a block's sum is exact in float32.
        # No constant either: XLA:CPU's XNNPACK fusion writes one out at the
        # matrix's size, every step (a quarter of a millisecond a step for a
        # 512x512 tensor).
        nonzero = ops.sum(ops.abs(ops.sign(x)), axis=1)
        zeros = layout.sizes - per_tensor(ops.cast(nonzero, "int32"), layout)
        return ops.cast(layout.sizes, x.dtype), ops.zeros_like(zeros), zeros
    zero = ops.where(x == 0, 1.0, 0.0)
    code = ops.sum(ops.where(finite, zero, _NONFINITE), axis=1)
    nonfinite = ops.floor(code / _NONFINITE)
    ints = ops.stack([nonfinite, code - _NONFINITE * nonfinite], 1)
    totals = per_tensor(ops.cast(ints, "int32"), layout)
    nonfinite = totals[:, 0] - layout.pads
    return ops.cast(layout.sizes - nonfinite, x.dtype), nonfinite, totals[:, 1]


def _sums(
    terms: Mapping[str, Tensor], finite: Tensor | None, layout: BlockLayout
) -> dict:
    """Each of `terms` summed over the finite elements by tensor, together
    (`finite` None: over every element)."""
    names = list(terms)
    if not names:
        return {}
    if finite is None:
        sums = [ops.sum(terms[n], axis=1) for n in names]
    else:
        sums = [ops.sum(ops.where(finite, terms[n], 0.0), axis=1) for n in names]
    sums = per_tensor(ops.stack(sums, 1), layout)
    return {n: sums[:, i] for i, n in enumerate(names)}


#: The per-tensor values of `Reductions` (those it took).
_PER_TENSOR = (
    "count",
    "n",
    "nonfinite",
    "zeros",
    "shift",
    "found",
    "low",
    "high",
    "sum",
    "sq",
)


class Reductions:
    """The one-pass reductions of the tensors of one layout, one value per
    tensor: what a statistic's `fast` reads.

    Attributes:
        count, n: Finite elements (in the compute dtype), and at least 1.
        zeros, nonfinite: Zero and non-finite elements (int32).
        sizes: All elements. dtype: The compute dtype.
        shift, found: The shift ("shift" or "extremes"), and whether it is an
            element (else 0).
        low, high: Min and max ("extremes").
        sum, sq: Sums of the finite elements and of their squares ("sum",
            "sq"), less the shift if "shift" is needed.
        terms: `{name: sum}` of the statistics' own element-wise terms.

    With `masked=False` every element is taken as finite, without a mask:
    right only where `sane` holds (a non-finite element makes "sum" NaN or
    Inf); for a tensor alone, unpadded (`prepare_alone`).
    """

    def __init__(
        self,
        x: Tensor,
        layout: BlockLayout,
        needs: set[str],
        terms: Mapping[str, Callable[[Tensor], Tensor]],
        masked: bool = True,
    ) -> None:
        finite = ops.isfinite(x) if masked else None
        self.sizes, self.dtype = layout.sizes, x.dtype
        self.count, self.nonfinite, self.zeros = _counts(x, finite, layout)
        self.n = ops.maximum(self.count, 1.0)
        self.shifted, self.has_extremes, d = "shift" in needs, False, x
        if needs & {"shift", "extremes"}:
            self.shift, self.found = _shift(x, layout)
            k = per_block(self.shift, layout)
            d = x - k if self.shifted else x
            # In place of non-finite elements, one of the tensor's own: neutral.
            self.low, self.high = extremes(x, finite, layout, k)
            self.has_extremes = True
        named = {n: d if n == "sum" else d * d for n in ("sum", "sq") if n in needs}
        named.update({f"term:{n}": f(x) for n, f in terms.items()})
        sums = _sums(named, finite, layout)
        self.sum, self.sq = sums.get("sum"), sums.get("sq")
        self.terms = {n: sums[f"term:{n}"] for n in terms}

    @classmethod
    def joined(cls, parts: Sequence[Reductions]) -> Reductions:
        """The reductions of several layouts (taken alike) as one, their
        tensors in order."""
        if len(parts) == 1:
            return parts[0]
        r, first = cls.__new__(cls), parts[0]
        r.sizes = np.concatenate([p.sizes for p in parts])
        r.dtype, r.shifted = first.dtype, first.shifted
        r.has_extremes = first.has_extremes
        for name in _PER_TENSOR:
            values = [getattr(p, name, None) for p in parts]
            joined = None if values[0] is None else ops.concatenate(values, 0)
            setattr(r, name, joined)
        r.terms = {
            n: ops.concatenate([p.terms[n] for p in parts], 0) for n in first.terms
        }
        return r

    @property
    def sane(self) -> Tensor:
        """Whether every reduction is finite: with `masked=False` and "sum"
        needed, whether every element was (or a sum overflowed)."""
        values = [self.sum, self.sq, *self.terms.values()]
        if self.has_extremes:
            values += [self.low, self.high]
        values = [v for v in values if v is not None]
        if not values:
            return ops.convert_to_tensor(True)
        return ops.all(ops.isfinite(ops.stack(values, 0)))

    @property
    def tiny(self) -> float:
        """Below this, a sum of squares may have lost terms (underflow)."""
        return _TINY * np.finfo(keras_backend.standardize_dtype(self.dtype)).tiny

    @property
    def doubtful(self) -> Tensor:
        """Where the pass itself cannot be trusted: extremes taken with
        non-finite elements replaced by a shift no element gave."""
        if self.has_extremes:
            return ~self.found
        return ops.zeros_like(self.count, dtype="bool")

    @functools.cached_property
    def mean_shifted(self) -> Tensor:
        """The mean less the shift."""
        return self.sum / self.n

    @functools.cached_property
    def mean(self) -> Tensor:
        """The mean of the finite elements."""
        if self.shifted:
            return self.mean_shifted + self.shift
        return self.mean_shifted

    @functools.cached_property
    def var(self) -> Tensor:
        """Their variance, from the sums around the shift ("shift")."""
        return ops.maximum(self.sq / self.n - ops.square(self.mean_shifted), 0.0)

    @functools.cached_property
    def sum_of_squares(self) -> Tensor:
        """The sum of their squares (of x, not less the shift)."""
        if not self.shifted:
            return self.sq
        return self.count * self.var + self.count * ops.square(self.mean)


class Careful:
    """The careful recomputation of the tensors of one layout, what a
    statistic's `careful` reads: each computed on first use.

    Attributes:
        count, n: As in `Reductions`.
        low, high: Min and max of the finite elements (+inf, -inf if none).
        scale: The largest magnitude (1 if 0 or none).
        sum, sq: Sums of the finite elements / scale and of their squares.
        var: The variance of the elements / scale, in two passes.
    """

    def __init__(self, x: Tensor, layout: BlockLayout, count: Tensor) -> None:
        self._x, self._layout, self._finite = x, layout, ops.isfinite(x)
        self.count, self.n = count, ops.maximum(count, 1.0)

    @functools.cached_property
    def _extremes(self) -> tuple[Tensor, Tensor]:
        return extremes(self._x, self._finite, self._layout)

    @property
    def low(self) -> Tensor:
        return self._extremes[0]

    @property
    def high(self) -> Tensor:
        return self._extremes[1]

    @functools.cached_property
    def scale(self) -> Tensor:
        largest = ops.maximum(ops.abs(self.low), ops.abs(self.high))
        has = (self.count > 0) & (largest > 0)
        return ops.where(has, largest, ops.ones_like(largest))

    @functools.cached_property
    def _scaled(self) -> tuple[Tensor, Tensor]:
        """The finite elements / scale (0 for the others), and their sums."""
        x, layout = ops.where(self._finite, self._x, 0.0), self._layout
        y = backend.divide(x, per_block(self.scale, layout))
        sums = ops.stack([ops.sum(y, axis=1), ops.sum(ops.square(y), axis=1)], 1)
        return y, per_tensor(sums, layout)

    @property
    def sum(self) -> Tensor:
        return self._scaled[1][:, 0]

    @property
    def sq(self) -> Tensor:
        return self._scaled[1][:, 1]

    @functools.cached_property
    def var(self) -> Tensor:
        y, layout = self._scaled[0], self._layout
        deviation = y - per_block(self.sum / self.n, layout)
        deviation = ops.where(self._finite, deviation, 0.0)
        return per_tensor(ops.sum(ops.square(deviation), axis=1), layout) / self.n


def batched_statistics(
    tensors: Sequence[Any],
    names: Sequence[str] = STATISTICS,
    unpack_large: bool = False,
) -> Tensor:
    """The statistics of each tensor, as rows of one matrix.

    Args:
        tensors: Floating tensors, `tf.IndexedSlices` densified (duplicate
            indices summed), in float32 (all in float64 if any is float64).
            Those of static shape are computed together, in a program that
            does not grow with their number; those of a size known only at
            run time together too, with a layout computed at run time.
        names: Which statistics to compute: registered names
            (`keras_gradmon.core.statistics`), usually of `STATISTICS`.
        unpack_large: Reduce each large tensor where it lies, without a
            mask, unless an element is not finite (`layout_groups`,
            `_alone_statistics`): about 30% less time a call on JAX and
            in a plain TensorFlow graph, more to compile under XLA (it
            compiles each such tensor's reductions apart)
            (`keras_gradmon.backend.unmasked_pays`).

    Returns:
        A float32 `[len(tensors), len(columns)]` matrix, `columns` being
        `registry.columns(names)`: `STATISTICS`, then the other statistics
        of `names`. Row `i` is `stack_statistics(tensors[i], names)` within
        rounding (NaN for the statistics not in `names`).

    Example:

    >>> import numpy as np
    >>> rows = batched_statistics([np.array([3.0, -4.0], "f4"), np.zeros([0], "f4")])
    >>> np.asarray(rows)[:, 0].tolist()  # the norms
    [5.0, 0.0]
    """
    columns = registry.lookup(registry.columns(names))
    if not tensors:
        return ops.zeros([0, len(columns)], "float32")
    compute = functools.partial(_statistics, columns=columns, names=set(names))
    alone = None
    if unpack_large:
        alone = functools.partial(_alone_statistics, columns=columns, names=set(names))
    [rows] = by_layout(tensors, compute, alone)
    return rows


def batched_difference_statistics(
    minuends: Sequence[Any],
    subtrahends: Sequence[Any],
    names: Sequence[str] = STATISTICS,
) -> Tensor:
    """`batched_statistics` of `minuends[i] - subtrahends[i]` (tensors of the
    same shapes), the differences taken between the two packed matrices:
    one subtraction, where one for each pair would be a kernel each to
    compile (hundreds, for a model of hundreds of variables). Where a size
    is known only at run time, each pair is subtracted first.

    Example:

    >>> rows = batched_difference_statistics([np.array([4.0, 0.0], "f4")],
    ...                                      [np.array([1.0, 4.0], "f4")])
    >>> np.asarray(rows)[:, 0].tolist()  # the norm of [3, -4]
    [5.0]
    """
    a, b = [densify(t) for t in minuends], [densify(t) for t in subtrahends]
    if not a or None in [backend.num_elements(t) for t in a]:
        return batched_statistics([x - y for x, y in zip(a, b)], names)
    dtype = compute_dtype(a + b)
    x, layout = prepare(a, dtype)
    y, _ = prepare(b, dtype)
    columns = registry.lookup(registry.columns(names))
    [rows] = _statistics(x - y, layout, columns, set(names))
    return rows


def _statistics(
    x: Tensor, layout: BlockLayout, columns: Sequence[Statistic], names: set[str]
) -> tuple:
    """`batched_statistics` of the tensors of one layout, as a 1-tuple: the
    statistics `names` and, free, the others of `columns` their reductions
    serve (their rows are flagged for the careful path too)."""
    needs, computed, terms = _served(columns, names)
    r = Reductions(x, layout, needs, terms)
    values = {s.name: s.fast(r) for s in computed}
    careful = [s for s in computed if s.careful is not None]
    if careful:
        fast = {s.name: values[s.name] for s in careful}
        rows = _untrusted(r, careful, fast)
        recompute = functools.partial(_careful, x, layout, r, careful, fast, rows)
        values.update(backend.cond(ops.any(rows), recompute, lambda: fast))
    return (_finish(values, r, computed, columns, names),)


def _alone_statistics(
    pieces: list,
    packed: Callable[[], tuple],
    columns: Sequence[Statistic],
    names: set[str],
) -> tuple:
    """`_statistics` of the large tensors, each its own unpadded matrix
    (`pieces`), reduced without a NaN mask: XLA:CPU's reductions read their
    input written out, so a mask costs a write and a read of every element.
    Right unless an element is not finite (then a sum is NaN or Inf: not
    `Reductions.sane`) or a row needs the careful path: then one
    conditional takes `packed()`, the masked pass of them packed."""
    needs, computed, terms = _served(columns, names)
    # Unmasked, the sum also tells whether every element was finite.
    r = Reductions.joined(
        [Reductions(x, lay, needs | {"sum"}, terms, False) for x, lay in pieces]
    )
    values = {s.name: s.fast(r) for s in computed}
    careful = [s for s in computed if s.careful is not None]
    fast_careful = {s.name: values[s.name] for s in careful}
    trusted = r.sane & ~ops.any(_untrusted(r, careful, fast_careful))
    fast = _finish(values, r, computed, columns, names)
    return (backend.cond(trusted, lambda: fast, lambda: packed()[0]),)


def _served(columns: Sequence[Statistic], names: set[str]) -> tuple:
    """The reductions the statistics `names` need, the statistics of
    `columns` those serve, and their element-wise terms by name."""
    needs = set().union(*(s.reductions for s in columns if s.name in names))
    computed = [s for s in columns if s.reductions <= needs]
    terms = {s.name: s.term for s in computed if s.term is not None}
    return needs, computed, terms


def _untrusted(r: Reductions, careful: list, fast: dict) -> Tensor:
    """The rows whose fast values of the `careful` statistics are not finite
    or not trusted, among those with a finite element."""
    bad = r.doubtful
    for s in careful:
        if s.untrusted is not None:
            bad |= s.untrusted(r)
        bad |= ~ops.isfinite(fast[s.name])
    return bad & (r.count > 0)


def _careful(
    x: Tensor, layout: BlockLayout, r: Reductions, careful: list, fast: dict, rows
) -> dict:
    """`fast`, its `rows` recomputed by each statistic's careful path."""
    c = Careful(x, layout, r.count)
    return {s.name: ops.where(rows, s.careful(c), fast[s.name]) for s in careful}


def _finish(
    values: dict, r: Reductions, computed: list, columns: list, names: set
) -> Tensor:
    """The float32 `[tensors, columns]` matrix: each statistic's `empty`
    value where a tensor has no finite element, NaN where not asked."""
    has, nan = r.count > 0, ops.full_like(r.count, float("nan"))
    for s in computed:
        if s.empty is not None:
            values[s.name] = ops.where(has, values[s.name], s.empty)
    wanted = [values[s.name] if s.name in names else nan for s in columns]
    return ops.cast(ops.stack(wanted, 1), "float32")


def batched_bucket_counts(
    tensors: Sequence[Any], buckets: int, unpack_large: bool = False
) -> tuple[Tensor, Tensor]:
    """`bucket_counts` of each tensor, as rows of two matrices.

    Args:
        tensors: As for `batched_statistics`.
        buckets: The number of buckets, a Python int >= 1.
        unpack_large: Count each large tensor where it lies, without a mask,
            unless an element is not finite (`_alone_bucket_counts`), as
            `batched_statistics`'s `unpack_large`.

    Returns:
        `(counts, ranges)`: int32 `[len(tensors), buckets]` and float32
        `[len(tensors), 2]`, row `i` being `bucket_counts(tensors[i], buckets)`.

    Example:

    >>> import numpy as np
    >>> counts, ranges = batched_bucket_counts([np.array([0.0, 1.0, 1.0], "f4")], 2)
    >>> np.asarray(counts).tolist(), np.asarray(ranges).tolist()
    ([[1, 2]], [[0.0, 1.0]])
    """
    if not tensors:
        return ops.zeros([0, buckets], "int32"), ops.zeros([0, 2], "float32")
    compute = functools.partial(_bucket_counts, buckets=buckets)
    alone = None
    if unpack_large:
        alone = functools.partial(_alone_bucket_counts, buckets=buckets)
    return by_layout(tensors, compute, alone)


def _bucket_counts(x: Tensor, layout: BlockLayout, buckets: int) -> tuple:
    """`batched_bucket_counts` of the tensors of one layout."""
    finite = ops.isfinite(x)
    low, high = extremes(x, finite, layout)
    low, high = ops.where(low <= high, low, 0.0), ops.where(low <= high, high, 0.0)
    # The arithmetic of `bucket_counts`, element for element.
    scale = ops.maximum(ops.abs(low), ops.abs(high))
    scale = ops.where(scale > 0, scale, ops.ones_like(scale))
    width = per_block(high / scale - low / scale, layout)
    low_b, scale_b = per_block(low, layout), per_block(scale, layout)
    index = _bucket_index(ops.where(finite, x, low_b), low_b, scale_b, width, buckets)
    index = ops.where(width > 0, index, buckets - 1)
    # Non-finite elements go to an extra bucket per tensor, dropped.
    index = ops.where(finite, index, buckets) + (buckets + 1) * layout.segments[:, None]
    size, index = (layout.count + 1) * (buckets + 1), ops.reshape(index, [-1])
    counts = backend.bincount(index, size)
    counts = ops.reshape(counts, [-1, buckets + 1])[:-1, :buckets]
    return counts, ops.cast(ops.stack([low, high], 1), "float32")


def _alone_bucket_counts(
    pieces: list, packed: Callable[[], tuple], buckets: int
) -> tuple[Tensor, Tensor]:
    """`_bucket_counts` of the large tensors, each its own unpadded matrix
    (`pieces`), without a mask, where every element is finite; else
    `packed()`, the masked pass of them packed. An Inf is an extreme; a NaN,
    which a min or max may pass over, makes a sum NaN (an overflowing one is
    only Inf). Each tensor's buckets are `_bucket_counts`'s arithmetic
    (`_bucket_index`), so the counts are the same either way."""
    lows = ops.stack([ops.min(x) for x, _ in pieces])
    highs = ops.stack([ops.max(x) for x, _ in pieces])
    sums = ops.stack([ops.sum(x) for x, _ in pieces])
    sane = ops.all(ops.isfinite(lows) & ops.isfinite(highs) & ~ops.isnan(sums))
    sizes = [int(np.prod(x.shape)) for x, _ in pieces]

    def unmasked() -> tuple[Tensor, Tensor]:
        scale = ops.maximum(ops.abs(lows), ops.abs(highs))
        scale = ops.where(scale > 0, scale, ops.ones_like(scale))
        width = highs / scale - lows / scale
        counts = ops.stack(
            [
                _unmasked_counts(x, lows[k], scale[k], width[k], buckets)
                for k, (x, _) in enumerate(pieces)
            ]
        )
        # All equal (width 0): every element in the last bucket.
        last = ops.arange(buckets)[None] == buckets - 1
        alike = ops.where(last, ops.convert_to_tensor(sizes)[:, None], 0)
        counts = ops.where(width[:, None] > 0, counts, ops.cast(alike, counts.dtype))
        ranges = ops.cast(ops.stack([lows, highs], 1), "float32")
        return ops.cast(counts, "int32"), ranges

    return backend.cond(sane, unmasked, packed)


def _unmasked_counts(
    x: Tensor, low: Tensor, scale: Tensor, width: Tensor, buckets: int
) -> Tensor:
    """The bucket counts of one tensor whose elements are all finite (width
    0 left to the caller)."""
    index = _bucket_index(x, low, scale, width, buckets)
    return backend.bincount(ops.reshape(index, [-1]), buckets)


def _bucket_index(
    x: Tensor, low: Tensor, scale: Tensor, width: Tensor, buckets: int
) -> Tensor:
    """The bucket of each finite element of `x`: `bucket_counts`'s
    arithmetic, element for element, on values scaled by their largest
    magnitude (`low`, `scale`, `width` broadcast over `x`)."""
    offset = backend.divide(x, scale) - low / scale
    position = backend.divide(offset, ops.where(width > 0, width, 1.0)) * buckets
    position = ops.clip(ops.floor(position), 0.0, buckets - 1)  # as rounded
    return ops.cast(position, "int32")


def tensor_statistics(x: Any, names: Sequence[str] = STATISTICS) -> dict[str, Tensor]:
    """Statistics of all elements of `x`, as float32 scalar tensors.

    Args:
        x: A tensor of floating dtype (float16, bfloat16, float32,
            float64), its shape static or known only at run time.
            `tf.IndexedSlices` are densified first (duplicates summed).
        names: Which statistics to compute: registered names
            (`keras_gradmon.core.statistics`), usually of `STATISTICS`.

    Returns:
        `{name: value}` for each of `names`. `mean`, `std`, `min` and `max`
        are NaN when `x` has no finite element; `norm` and `max_abs` are
        then 0.

    Example:

    >>> import numpy as np
    >>> s = tensor_statistics(np.array([3.0, -4.0, 0.0, np.nan], "f4"))
    >>> float(s["norm"]), float(s["nonfinite"]), float(s["zero_fraction"])
    (5.0, 1.0, 0.25)
    """
    row, columns = stack_statistics(x, names), registry.columns(names)
    return {name: row[columns.index(name)] for name in names}


def stack_statistics(x: Any, names: Sequence[str] = STATISTICS) -> Tensor:
    """The statistics of `x` as a float32 vector in `STATISTICS` order (then
    the other registered statistics of `names`, as `registry.columns`);
    statistics not in `names` are not computed and read NaN.

    Example:

    >>> import numpy as np
    >>> tuple(stack_statistics(np.ones([4], "f4")).shape)
    (8,)
    """
    return batched_statistics([x], names)[0]


# L2 norms of many tensors together -------------------------------------------


def combine_norms(norms: Any) -> Tensor:
    """L2 norm of the concatenation of tensors, given each tensor's L2 norm.

    This is sqrt(sum of squares) of every element, never a sum of norms.
    It is scaled by the largest norm so that norms near the float32 limit do
    not overflow when squared.

    Args:
        norms: A 1-D float tensor of per-tensor L2 norms (may be empty).

    Returns:
        A scalar tensor of the same dtype; 0 for an empty input.

    Example:

    >>> import numpy as np
    >>> float(combine_norms(np.array([3.0, 4.0], "f4")))
    5.0
    """
    norms = ops.convert_to_tensor(norms)
    largest = ops.max(norms, initial=0.0)
    scale = ops.where(largest > 0, largest, ops.ones_like(largest))
    return scale * ops.sqrt(ops.sum(ops.square(norms / scale)))


def _same_dtype(values: list) -> list:
    """`values` cast to float32 (float64 if any is) unless already all float32
    or all float64."""
    dtypes = {keras_backend.standardize_dtype(v.dtype) for v in values}
    if len(dtypes) > 1 or dtypes - {"float32", "float64"}:
        wide = "float64" if "float64" in dtypes else "float32"
        values = [ops.cast(v, wide) for v in values]
    return values


def batched_global_norm(tensors: Sequence[Any]) -> tuple[Tensor, Tensor]:
    """The L2 norm of all elements together, safe from overflow.

    Usually the framework's own global norm (`tf.linalg.global_norm(tensors)`
    bit for bit on TensorFlow), None skipped; a `tf.IndexedSlices` counts as
    its dense tensor, duplicate indices summed (`tf.linalg.global_norm`
    would count its values: another number when an index repeats); if that
    is not finite, one conditional recomputes it scaled, in float64 (finite
    float32 tensors can have a norm above float32's max; on JAX without
    `jax_enable_x64`, in float32: such a norm is then inf). Shapes may be
    known only at run time (TensorFlow).

    Args:
        tensors: Floating tensors; if of several or half-precision dtypes,
            cast to float32 (float64 if any is) first.

    Returns:
        `(norm, all_finite)`: a float64 scalar (`backend.wide_float()`; the
        value of the framework's global norm cast, also when NaN or Inf) and
        whether every element is finite.

    Example:

    >>> import numpy as np
    >>> norm, finite = batched_global_norm([np.array([3e30, 4e30], "f4")])
    >>> round(float(norm) / 1e30, 4), bool(finite)  # squares above float32's max
    (5.0, True)
    """
    values = [backend.densify(t) for t in tensors if t is not None]
    wide = backend.wide_float()
    if not values:
        return ops.convert_to_tensor(0.0, wide), ops.convert_to_tensor(True)
    values = _same_dtype(values)
    fast = backend.global_norm(values)

    def rescue() -> tuple[Tensor, Tensor]:
        parts = [ops.reshape(v, [-1]) for v in values]
        flat = ops.cast(ops.concatenate(parts, 0), wide)
        finite = ops.isfinite(flat)
        largest = ops.max(ops.where(finite, ops.abs(flat), 0.0), initial=0.0)
        scale = ops.where(largest > 0, largest, 1.0)
        norm = scale * ops.sqrt(ops.sum(ops.square(flat / scale)))
        all_finite = ops.all(finite)
        return ops.where(all_finite, norm, ops.cast(fast, wide)), all_finite

    exact = (ops.cast(fast, wide), ops.convert_to_tensor(True))
    return backend.cond(ops.isfinite(fast), lambda: exact, rescue)
