"""The rows of a histogram as TensorBoard draws them, `(left, right,
count)`, with bucket edges short enough to read on an axis.

One definition serves every histogram: `readable_rows` is written against
`ArrayOps`, so the host runs it on NumPy (`histogram_rows`) and the in-
graph writer on TensorFlow ops (`legacy.graph_writer`), with the same
float64 operations in the same order. Each is an IEEE operation rounded
once (+, -, *, /, floor, ceil, round half to even, comparisons, lookups),
so both give the same bits. No logarithm, power or decimal string: their
results differ by library.

Example:

>>> histogram_rows(np.array([1, 2]), np.array([0.0, 1.0])).tolist()
[[0.0, 0.5, 1.0], [0.5, 1.0, 2.0]]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

#: The fewest significant digits of a readable bucket edge.
EDGE_DIGITS = 3
#: The most: with 15 digits a rounded edge's integer part is below 2**50,
#: which `_times_power_of_ten` multiplies exactly.
_MOST_DIGITS = 15
#: The powers of ten in the table (normal doubles only).
_LOWEST, _HIGHEST = -307, 308


class ArrayOps(Protocol):
    """The array functions `readable_rows` needs, with NumPy's meaning
    (`NUMPY_OPS`); `keras_gradmon.legacy.graph_writer` has TensorFlow's.

    Integer arrays are int64, floating ones float64; `where` broadcasts.
    """

    def floor(self, x: Any) -> Any: ...
    def ceil(self, x: Any) -> Any: ...
    def rint(self, x: Any) -> Any: ...  # half to even
    def abs(self, x: Any) -> Any: ...
    def maximum(self, x: Any, y: Any) -> Any: ...
    def isfinite(self, x: Any) -> Any: ...
    def where(self, condition: Any, x: Any, y: Any) -> Any: ...
    def all(self, x: Any, axis: int) -> Any: ...  # axis kept
    def sum(self, x: Any, axis: int) -> Any: ...  # axis kept; booleans: int64
    def take(self, table: np.ndarray, index: Any) -> Any: ...  # rows: axis 0
    def count_at_most(self, table: np.ndarray, x: Any) -> Any: ...
    def concat(self, parts: Sequence[Any], axis: int) -> Any: ...
    def stack(self, parts: Sequence[Any], axis: int) -> Any: ...
    def unstack(self, x: Any, axis: int) -> Sequence[Any]: ...


class _NumpyOps:
    """`ArrayOps` of NumPy."""

    floor, ceil, rint = map(staticmethod, (np.floor, np.ceil, np.rint))
    abs, isfinite, where = map(staticmethod, (np.abs, np.isfinite, np.where))
    maximum = staticmethod(np.maximum)
    concat, stack = map(staticmethod, (np.concatenate, np.stack))

    @staticmethod
    def all(x: Any, axis: int) -> Any:
        return np.all(x, axis=axis, keepdims=True)

    @staticmethod
    def sum(x: Any, axis: int) -> Any:
        dtype = np.int64 if x.dtype == bool else None
        return np.sum(x, axis=axis, dtype=dtype, keepdims=True)

    @staticmethod
    def take(table: np.ndarray, index: Any) -> Any:
        return np.take(table, index, axis=0)

    @staticmethod
    def count_at_most(table: np.ndarray, x: Any) -> Any:
        return np.searchsorted(table, x, side="right").astype(np.int64)

    @staticmethod
    def unstack(x: Any, axis: int) -> Sequence[Any]:
        return tuple(np.moveaxis(x, axis, 0))


#: `ArrayOps` of NumPy.
NUMPY_OPS: ArrayOps = _NumpyOps()


@functools.cache
def powers_of_ten() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`(near, head, tail, rest)` for p from -307 to 308: the double nearest
    10**p, its top 26 significant bits and its other bits (`near = head +
    tail`), and the double nearest `10**p - near`, all float64 `[616]`."""
    near, rest = [], []
    for p in range(_LOWEST, _HIGHEST + 1):
        exact = Fraction(10) ** p
        near.append(float(exact))
        rest.append(float(exact - Fraction(near[-1])))
    nearest = np.array(near)
    mantissa, exponent = np.frexp(nearest)
    head = np.ldexp(np.floor(mantissa * 2.0**26), exponent - 26)
    return nearest, head, nearest - head, np.array(rest)


@functools.cache
def _signed_powers_of_ten() -> np.ndarray:
    """`[616, 5]`: `near, head, -head, -tail, -rest` of `powers_of_ten`, as
    columns, so one lookup fetches all five."""
    near, head, tail, rest = powers_of_ten()
    return np.stack([near, head, -head, -tail, -rest], 1)


@functools.cache
def _scales() -> np.ndarray:
    """`[616]`: the double nearest 10**|p| for p from -307 to 308."""
    p = np.arange(_LOWEST, _HIGHEST + 1)
    return powers_of_ten()[0][np.abs(p) - _LOWEST]


def _times_power_of_ten(m: Any, index: Any, ops: ArrayOps) -> Any:
    """The double nearest `m * 10**p` (`index` int64 `p + 307`, `m` an
    integer below 2**50 in magnitude, either broadcast to the other), but in
    cases within 2**-100 of a tie: `m` times 10**p held as two doubles, the
    product of the first one exact (Dekker)."""
    # Negated tables: `x - y * -t` is `x + y * t` to the bit, and Grappler's
    # arithmetic optimizer, which turns chains of additions into one AddN in
    # another order, leaves subtractions as they are.
    looked_up = ops.take(_signed_powers_of_ten(), index)
    near, head, minus_head, minus_tail, minus_rest = ops.unstack(looked_up, -1)
    size = ops.abs(m)
    size_high = ops.floor(size / 2.0**25) * 2.0**25  # both halves below 2**26
    size_low = size - size_high
    product = size * near
    error = size_high * head - product - size_high * minus_tail
    error = error - size_low * minus_head - size_low * minus_tail
    result = product + (error - size * minus_rest)
    return ops.where(m < 0.0, -result, result)


#: The integers of the outer edges' candidates: one below, at, one above.
_STEPS = np.array([-1.0, 0.0, 1.0])[:, None, None, None]
#: The outer edges' digits: the inner edges' ones, and one more.
_MORE = np.array([[0], [1]], dtype=np.int64)


def readable_edges(low: Any, high: Any, k: int, ops: ArrayOps = NUMPY_OPS) -> Any:
    """`[n, k + 1]` float64 edges of `k` equal buckets over `[low, high]`
    (float64 `[n, 1]`, `low < high`, the width finite), readable on an axis.

    The edges are rounded to `_digits` significant digits (3 at least), at
    which the last digit of the largest edge is worth at most two tenths of
    a bucket: the inner edges are rounded to the nearest, so none moves by
    more than a tenth of a bucket. The first edge is rounded down and the
    last up, so they hold the range, each with one digit more where that
    would move it by more than a tenth. Each edge is the double nearest its
    decimal (`float(f"{e:.3g}") == e` where 3 digits are chosen). Past 15
    digits (or two tenths of a bucket below 1e-307), or where rounding
    error would still move an edge by more than a tenth or the edges would
    not increase (checked in float64), they stay exact.

    Example:

    >>> readable_edges(np.array([[6.0]]), np.array([[1.8e31]]), 2).tolist()
    [[6.0, 9e+30, 1.8e+31]]
    """
    width = high - low
    positions = np.arange(k + 1, dtype=np.float64) / k
    exact = ops.concat([low, (low + width * positions)[:, 1:-1], high], 1)
    tolerance = 0.1 * width / k
    digits = _digits(low, high, tolerance, ops)
    most = np.int64(_MOST_DIGITS)
    rounded = _rounded(exact, ops.where(digits > most, most, digits), tolerance, ops)
    moved = ops.abs(rounded - exact)
    steps = rounded[:, 1:] - rounded[:, :-1]
    fits = ops.all(moved <= tolerance, 1) & ops.all(steps > 0.0, 1)
    return ops.where(fits & (digits <= most), rounded, exact)


def _digits(low: Any, high: Any, tolerance: Any, ops: ArrayOps) -> Any:
    """`[n, 1]` int64: `e - p + 1`, 3 at least, `e` the decade of the larger
    of `|low|` and `|high|` and `p` that of twice `tolerance` (`10**e <= x <
    10**(e + 1)`, against the doubles nearest the powers of ten); 16 where
    twice `tolerance` is below 1e-307."""
    larger = ops.maximum(ops.abs(low), ops.abs(high))
    # The table's powers at most x: the decade + 308, 0 below 1e-307.
    sizes = ops.concat([larger, 2.0 * tolerance], 1)
    above = ops.count_at_most(powers_of_ten()[0], sizes)
    above_e, above_p = above[:, :1], above[:, 1:]
    digits = ops.maximum(above_e - above_p + 1, np.int64(EDGE_DIGITS))
    return ops.where(above_p == 0, np.int64(_MOST_DIGITS + 1), digits)


def _rounded(values: Any, digits: Any, tolerance: Any, ops: ArrayOps) -> Any:
    """`[n, k + 1]`: edges `values` `[n, k + 1]` at `digits` `[n, 1]`
    significant digits (int64, `EDGE_DIGITS` .. `_MOST_DIGITS`), each the
    double nearest a decimal; the outer ones as `_outer`."""
    # An edge of decade e (10**e <= |edge|, e at least -307) at d digits is
    # m * 10**p, p = e - d + 1 but at least -307; `index` is p + 307.
    above_lowest = ops.count_at_most(powers_of_ten()[0], ops.abs(values))
    index = ops.maximum(above_lowest - digits, np.int64(0))
    inner = _times_power_of_ten(ops.rint(_scaled(values, index, ops)), index, ops)
    k = values.shape[1] - 1
    # The outer edges at `digits` and one more (15 at most): `[n, 2, 2]`.
    more = digits[:, :, None] + _MORE
    more = ops.where(more > _MOST_DIGITS, np.int64(_MOST_DIGITS), more)
    index = ops.maximum(above_lowest[:, None, ::k] - more, np.int64(0))
    ends = _outer(values[:, None, ::k], index, ops)
    fewer, longer = ops.unstack(ends, 1)
    ends = ops.where(ops.abs(fewer - values[:, ::k]) <= tolerance, fewer, longer)
    return ops.concat([ends[:, :1], inner[:, 1:-1], ends[:, 1:]], 1)


def _scaled(values: Any, index: Any, ops: ArrayOps) -> Any:
    """`values` over 10**p (`index` p + 307), rounded once where 10**|p| is
    exact (|p| <= 22): an edge that is a short decimal gives an integer."""
    scale = ops.take(_scales(), index)
    return ops.where(index < -_LOWEST, values * scale, values / scale)


def _outer(values: Any, index: Any, ops: ArrayOps) -> Any:
    """The first and last edges `values` (`[..., 2]`) rounded down and up,
    at the powers of ten of `index`. The quotient is rounded, so its floor
    (ceiling) may be one off: the first edge is the largest of three
    candidates at most the value, the last the smallest at least it."""
    scaled = _scaled(values, index, ops)
    m = ops.where(np.array([True, False]), ops.floor(scaled), ops.ceil(scaled))
    candidates = _times_power_of_ten(m + _STEPS, index, ops)
    below, at, above = ops.unstack(candidates, 0)
    low = ops.where(above <= values, above, ops.where(at <= values, at, below))
    high = ops.where(below >= values, below, ops.where(at >= values, at, above))
    return ops.concat([low[..., :1], high[..., 1:]], -1)


def readable_rows(counts: Any, value_ranges: Any, ops: ArrayOps = NUMPY_OPS) -> Any:
    """TensorBoard's `[n, k, 3]` float64 rows `(left, right, count)` of `n`
    histograms, from float64 `[n, k]` bucket counts and `[n, 2]` ranges
    (`core.histogram.bucket_counts`), with `readable_edges`.

    A range with all values equal (or none, or not finite, taken as
    `[0, 0]`) becomes that value +- half its order of magnitude (+- 0.5
    below 1), and its count moves to the bucket that holds the value. The
    other counts are kept. Non-finite values are in no bucket: the
    `nonfinite` statistics count them.

    Example:

    >>> readable_rows(np.array([[1.0, 2.0]]), np.array([[0.0, 1.0]])).tolist()
    [[[0.0, 0.5, 1.0], [0.5, 1.0, 2.0]]]
    """
    zero = np.float64(0.0)
    low, high = ops.unstack(value_ranges[:, :, None], 1)  # [n, 1]
    finite = ops.isfinite(high - low)
    value, high = ops.where(finite, low, zero), ops.where(finite, high, zero)
    flat = high <= value
    near, size = powers_of_ten()[0], ops.abs(value)
    decade = ops.maximum(ops.count_at_most(near, size) - 1, np.int64(0))
    half = ops.where(size >= 1.0, ops.take(near, decade), np.float64(1)) / 2
    low = ops.where(flat, value - half, value)
    high = ops.where(flat, value + half, high)
    k = counts.shape[1]
    edges = readable_edges(low, high, k, ops)
    left, right = edges[:, :-1], edges[:, 1:]
    bucket = ops.sum(left <= value, 1) - 1
    moved = ops.where(bucket == np.arange(k), ops.sum(counts, 1), zero)
    counts = ops.where(flat, moved, counts)
    return ops.stack([left, right, counts], 2)


def histogram_rows(counts: np.ndarray, value_range: np.ndarray) -> np.ndarray:
    """TensorBoard's `[k, 3]` float64 rows `(left, right, count)` of one
    histogram (`readable_rows`), on the host.

    Example:

    >>> histogram_rows(np.array([1, 2]), np.array([6.0, 1.8e31])).tolist()
    [[6.0, 9e+30, 1.0], [9e+30, 1.8e+31, 2.0]]
    """
    counts = np.asarray(counts, dtype=np.float64)[None]
    value_range = np.asarray(value_range, dtype=np.float64)[None]
    with np.errstate(all="ignore"):  # past the largest double: not taken
        return readable_rows(counts, value_range)[0]
