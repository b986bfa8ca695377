"""Statistics of many tensors at once, in a program that does not grow with
their number: the tensors, padded with NaN (ignored like all non-finite
elements) to whole blocks, form one `[blocks, block]` matrix reduced by rows,
then by tensor with segment ids (`layout.py`: static ones; tensors of a size
known only at run time form a second matrix, its layout computed at run
time). One pass per reduction in float32 (float64 if any tensor is), sums
around a shift (a median of three elements) against cancellation; one
conditional recomputes, scaled and in two passes, the rows that pass cannot
be trusted with. Reductions read a `where`: XLA:CPU then runs fast library
ones. Written in `keras.ops`, the same on every Keras backend; what differs
(the conditional, bin counts, densifying) is in `keras_gradmon.backend`."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from keras import backend as keras_backend
from keras import ops

from keras_gradmon import backend
from keras_gradmon.backend import Tensor
from keras_gradmon.schema import STATISTICS
from keras_gradmon.stats.layout import Layout, by_layout

#: A statistic is named in `keras_gradmon.schema.STATISTICS`; it is defined
#: here alone: the reductions it needs (`_NEEDS`) and how they finish into
#: its value (`_finish`).

# A block sums 1 per zero, _NONFINITE per non-finite element: exact in float32.
_NONFINITE = 4096.0
# As `tensor_statistics`: sums of squares below _TINY smallest normal numbers
# may have lost terms; a squared mean above _CANCELLATION variances cancels.
_TINY, _CANCELLATION = 1e8, 1e2
# The reductions each statistic needs ("shift": sums around a shift).
_NEEDS = {"norm": {"sq"}, "mean": {"sum"}, "std": {"sum", "sq", "shift", "extremes"}}
_NEEDS.update({name: {"extremes"} for name in ("min", "max", "max_abs")})


def _segment_min(data: Tensor, segments: Any, num_segments: int) -> Tensor:
    return -ops.segment_max(-data, segments, num_segments=num_segments)


def _per_tensor(partials: Tensor, layout: Layout, op=ops.segment_sum) -> Tensor:
    return op(partials, layout.segments, num_segments=layout.count + 1)[:-1]


def _per_block(values: Tensor, layout: Layout) -> Tensor:
    return ops.take(ops.pad(values, [[0, 1]]), layout.segments, 0)[:, None]


def _extremes(x: Tensor, finite: Tensor, layout: Layout, k=None) -> tuple:
    """Min and max by tensor, non-finite elements replaced by k (or +-inf)."""
    inf = float("inf")
    low = ops.min(ops.where(finite, x, inf if k is None else k), axis=1)
    high = ops.max(ops.where(finite, x, -inf if k is None else k), axis=1)
    low = _per_tensor(low, layout, _segment_min)
    return low, _per_tensor(high, layout, ops.segment_max)


def _shift(x: Tensor, layout: Layout) -> tuple[Tensor, Tensor]:
    """Median of the finite ones of 3 elements by tensor, and if there was one."""
    samples = ops.take(ops.reshape(x, [-1]), layout.samples)
    finite = ops.isfinite(samples)
    ordered = ops.sort(ops.where(finite, samples, float("inf")), axis=1)
    found = ops.sum(ops.cast(finite, "int32"), axis=1)
    middle = ops.maximum(found - 1, 0) // 2
    middle = ops.take_along_axis(ordered, middle[:, None], axis=1)[:, 0]
    return ops.where(found > 0, middle, ops.zeros_like(middle)), found > 0


def _counts(x: Tensor, finite: Tensor, layout: Layout) -> dict:
    zero = ops.where(x == 0, 1.0, 0.0)
    code = ops.sum(ops.where(finite, zero, _NONFINITE), axis=1)
    nonfinite = ops.floor(code / _NONFINITE)
    ints = ops.stack([nonfinite, code - _NONFINITE * nonfinite], 1)
    totals = _per_tensor(ops.cast(ints, "int32"), layout)
    nonfinite = totals[:, 0] - layout.pads
    n = ops.cast(layout.sizes - nonfinite, x.dtype)
    return {"n": n, "nonfinite": nonfinite, "zeros": totals[:, 1]}


def _reductions(x: Tensor, finite: Tensor, layout: Layout, needs: set) -> dict:
    """The one-pass sums (around the shift) and extremes of each tensor."""
    r, d = {}, x
    if needs & {"shift", "extremes"}:
        r["shift"], r["found"] = _shift(x, layout)
        k = _per_block(r["shift"], layout)
        d = x - k if "shift" in needs else x
        # In place of non-finite elements, one of the tensor's own: neutral.
        r["low"], r["high"] = _extremes(x, finite, layout, k)
    names = [n for n in ("sum", "sq") if n in needs]
    if names:
        terms = {"sum": d, "sq": d * d}
        sums = [ops.sum(ops.where(finite, terms[n], 0.0), axis=1) for n in names]
        sums = _per_tensor(ops.stack(sums, 1), layout)
        r.update({n: sums[:, i] for i, n in enumerate(names)})
    return r


def _fast(r: dict, c: dict, needs: set) -> tuple[dict, Tensor]:
    """Statistics from the one-pass sums, and which rows need the careful path."""
    n, sq = ops.maximum(c["n"], 1.0), r.get("sq")
    out, bad = {}, ops.zeros_like(c["n"], dtype="bool")
    tiny = _TINY * np.finfo(keras_backend.standardize_dtype(n.dtype)).tiny
    if "extremes" in needs:
        out["min"], out["max"], bad = r["low"], r["high"], ~r["found"]
    if "sum" in needs:
        mean_d = r["sum"] / n
        out["mean"] = mean_d + r["shift"] if "shift" in needs else mean_d
    if "shift" in needs:
        var = ops.maximum(r["sq"] / n - ops.square(mean_d), 0.0)
        out["std"], sq = ops.sqrt(var), c["n"] * var + c["n"] * ops.square(out["mean"])
        spread = ops.maximum(r["high"] - r["shift"], r["shift"] - r["low"])
        bad |= (r["sq"] < tiny) & (spread > 0)  # lost squares of deviations
        bad |= ops.square(mean_d) > _CANCELLATION * var
    if sq is not None:  # the sum of squares of x
        out["norm"] = ops.sqrt(sq)
        bad |= (sq < tiny) & (c["n"] > ops.cast(c["zeros"], n.dtype))
    for value in out.values():
        bad |= ~ops.isfinite(value)
    return out, bad & (c["n"] > 0)


def _careful(x: Tensor, layout: Layout, c: dict, fast: dict, rows) -> dict:
    """`fast`, its `rows` recomputed from x / max|x|, the variance in 2 passes."""
    finite, n = ops.isfinite(x), ops.maximum(c["n"], 1.0)
    low, high = _extremes(x, finite, layout)
    largest = ops.maximum(ops.abs(low), ops.abs(high))
    scale = ops.where((c["n"] > 0) & (largest > 0), largest, ops.ones_like(largest))
    y = backend.divide(ops.where(finite, x, 0.0), _per_block(scale, layout))
    sums = ops.stack([ops.sum(y, axis=1), ops.sum(ops.square(y), axis=1)], 1)
    sums = _per_tensor(sums, layout)
    deviation = ops.where(finite, y - _per_block(sums[:, 0] / n, layout), 0.0)
    var = _per_tensor(ops.sum(ops.square(deviation), axis=1), layout) / n
    mean, std, norm = (scale * v for v in (sums[:, 0] / n, var**0.5, sums[:, 1] ** 0.5))
    slow = {"min": low, "max": high, "mean": mean, "std": std, "norm": norm}
    return {k: ops.where(rows, slow[k], v) for k, v in fast.items()}


def _finish(s: dict, c: dict, layout: Layout, names: Sequence[str]) -> Tensor:
    has, dtype = c["n"] > 0, c["n"].dtype
    nan = ops.full_like(c["n"], float("nan"))
    s = {k: ops.where(has, v, 0.0 if k == "norm" else nan) for k, v in s.items()}
    if "min" in s:
        largest = ops.maximum(ops.abs(s["min"]), ops.abs(s["max"]))
        s["max_abs"] = ops.where(has, largest, 0.0)
    sizes = ops.cast(ops.maximum(layout.sizes, 1), dtype)
    s["zero_fraction"] = ops.cast(c["zeros"], dtype) / sizes
    s["nonfinite"] = ops.cast(c["nonfinite"], dtype)
    rows = ops.stack([s[k] if k in names else nan for k in STATISTICS], 1)
    return ops.cast(rows, "float32")


def batched_statistics(
    tensors: Sequence[Any],
    names: Sequence[str] = STATISTICS,
) -> Tensor:
    """The statistics of each tensor, as rows of one matrix.

    Args:
        tensors: Floating tensors, `tf.IndexedSlices` densified (duplicate
            indices summed), in float32 (all in float64 if any is float64).
            Those of static shape are computed together, in a program that
            does not grow with their number; those of a size known only at
            run time together too, with a layout computed at run time.
        names: Which statistics to compute (a subset of `STATISTICS`).

    Returns:
        A float32 `[len(tensors), len(STATISTICS)]` matrix, row `i` being
        `stack_statistics(tensors[i], names)` within rounding (NaN for the
        statistics not in `names`).

    Example:

    >>> rows = batched_statistics([np.array([3.0, -4.0], "f4"), np.zeros([0], "f4")])
    >>> np.asarray(rows)[:, 0].tolist()  # the norms
    [5.0, 0.0]
    """
    unknown = [n for n in names if n not in STATISTICS]
    if unknown:
        raise ValueError(
            f"Unknown statistic {unknown[0]!r}. Valid names: {list(STATISTICS)}. "
            f"Received: names={list(names)!r}"
        )
    if not tensors:
        return ops.zeros([0, len(STATISTICS)], "float32")
    [rows] = by_layout(tensors, functools.partial(_statistics, names=names))
    return rows


def _statistics(x: Tensor, layout: Layout, names: Sequence[str]) -> tuple:
    """`batched_statistics` of the tensors of one layout, as a 1-tuple."""
    needs = set().union(*(_NEEDS.get(n, set()) for n in names))
    finite = ops.isfinite(x)
    counts = _counts(x, finite, layout)
    fast, rows = _fast(_reductions(x, finite, layout, needs), counts, needs)
    if fast:
        careful = functools.partial(_careful, x, layout, counts, fast, rows)
        fast = backend.cond(ops.any(rows), careful, lambda: fast)
    return (_finish(fast, counts, layout, names),)


def batched_bucket_counts(
    tensors: Sequence[Any], buckets: int
) -> tuple[Tensor, Tensor]:
    """`bucket_counts` of each tensor, as rows of two matrices.

    Args:
        tensors: As for `batched_statistics`.
        buckets: The number of buckets, a Python int >= 1.

    Returns:
        `(counts, ranges)`: int32 `[len(tensors), buckets]` and float32
        `[len(tensors), 2]`, row `i` being `bucket_counts(tensors[i], buckets)`.

    Example:

    >>> counts, ranges = batched_bucket_counts([np.array([0.0, 1.0, 1.0], "f4")], 2)
    >>> np.asarray(counts).tolist(), np.asarray(ranges).tolist()
    ([[1, 2]], [[0.0, 1.0]])
    """
    if not tensors:
        return ops.zeros([0, buckets], "int32"), ops.zeros([0, 2], "float32")
    return by_layout(tensors, functools.partial(_bucket_counts, buckets=buckets))


def _bucket_counts(x: Tensor, layout: Layout, buckets: int) -> tuple:
    """`batched_bucket_counts` of the tensors of one layout."""
    finite = ops.isfinite(x)
    low, high = _extremes(x, finite, layout)
    low, high = ops.where(low <= high, low, 0.0), ops.where(low <= high, high, 0.0)
    # The arithmetic of `bucket_counts`, element for element.
    scale = ops.maximum(ops.abs(low), ops.abs(high))
    scale = ops.where(scale > 0, scale, ops.ones_like(scale))
    width = _per_block(high / scale - low / scale, layout)
    low_b, scale_b = _per_block(low, layout), _per_block(scale, layout)
    offset = backend.divide(ops.where(finite, x, low_b), scale_b) - low_b / scale_b
    position = backend.divide(offset, ops.where(width > 0, width, 1.0)) * buckets
    position = ops.clip(ops.floor(position), 0.0, buckets - 1)  # as rounded
    index = ops.cast(position, "int32")
    index = ops.where(width > 0, index, buckets - 1)
    # Non-finite elements go to an extra bucket per tensor, dropped.
    index = ops.where(finite, index, buckets) + (buckets + 1) * layout.segments[:, None]
    size, index = (layout.count + 1) * (buckets + 1), ops.reshape(index, [-1])
    counts = backend.bincount(index, size)
    counts = ops.reshape(counts, [-1, buckets + 1])[:-1, :buckets]
    return counts, ops.cast(ops.stack([low, high], 1), "float32")
