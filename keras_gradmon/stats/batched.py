"""Statistics of many tensors at once, in a program that does not grow with
their number: the tensors, padded with NaN (ignored like all non-finite
elements) to whole blocks, form one `[blocks, block]` matrix reduced by rows,
then by tensor with segment ids (`layout.py`: static ones; tensors of a size
known only at run time form a second matrix, its layout computed at run
time). One pass per reduction in float32 (float64 if any tensor is), sums
around a shift (a median of three elements) against cancellation; one
conditional recomputes, scaled and in two passes, the rows that pass cannot
be trusted with. Reductions read a `tf.where`: XLA:CPU then runs fast library
ones."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_gradmon.graph import gate
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


def _per_tensor(partials: tf.Tensor, layout: Layout, op=tf.math.unsorted_segment_sum):
    return op(partials, layout.segments, layout.count + 1)[:-1]


def _per_block(values: tf.Tensor, layout: Layout) -> tf.Tensor:
    return tf.gather(tf.pad(values, [[0, 1]]), layout.segments)[:, None]


def _extremes(x: tf.Tensor, finite: tf.Tensor, layout: Layout, k=None) -> tuple:
    """Min and max by tensor, non-finite elements replaced by k (or +-inf)."""
    inf = tf.constant(float("inf"), x.dtype)
    low = tf.reduce_min(tf.where(finite, x, inf if k is None else k), 1)
    high = tf.reduce_max(tf.where(finite, x, -inf if k is None else k), 1)
    low = _per_tensor(low, layout, tf.math.unsorted_segment_min)
    return low, _per_tensor(high, layout, tf.math.unsorted_segment_max)


def _shift(x: tf.Tensor, layout: Layout) -> tuple[tf.Tensor, tf.Tensor]:
    """Median of the finite ones of 3 elements by tensor, and if there was one."""
    samples = tf.gather(tf.reshape(x, [-1]), layout.samples)
    finite = tf.math.is_finite(samples)
    ordered = tf.sort(tf.where(finite, samples, float("inf")), axis=1)
    found = tf.reduce_sum(tf.cast(finite, tf.int32), 1)
    middle = tf.gather(ordered, tf.maximum(found - 1, 0) // 2, batch_dims=1)
    return tf.where(found > 0, middle, tf.zeros_like(middle)), found > 0


def _counts(x: tf.Tensor, finite: tf.Tensor, layout: Layout) -> dict:
    code = tf.reduce_sum(tf.where(finite, tf.where(x == 0, 1.0, 0.0), _NONFINITE), 1)
    nonfinite = tf.floor(code / _NONFINITE)
    ints = tf.cast(tf.stack([nonfinite, code - _NONFINITE * nonfinite], 1), tf.int32)
    totals = _per_tensor(ints, layout)
    nonfinite = totals[:, 0] - layout.pads
    n = tf.cast(layout.sizes - nonfinite, x.dtype)
    return {"n": n, "nonfinite": nonfinite, "zeros": totals[:, 1]}


def _reductions(x: tf.Tensor, finite: tf.Tensor, layout: Layout, needs: set) -> dict:
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
        sums = [tf.reduce_sum(tf.where(finite, terms[n], 0.0), 1) for n in names]
        sums = _per_tensor(tf.stack(sums, 1), layout)
        r.update({n: sums[:, i] for i, n in enumerate(names)})
    return r


def _fast(r: dict, c: dict, needs: set) -> tuple[dict, tf.Tensor]:
    """Statistics from the one-pass sums, and which rows need the careful path."""
    n, sq = tf.maximum(c["n"], 1.0), r.get("sq")
    out, bad = {}, tf.zeros_like(c["n"], tf.bool)
    tiny = _TINY * np.finfo(n.dtype.name).tiny
    if "extremes" in needs:
        out["min"], out["max"], bad = r["low"], r["high"], ~r["found"]
    if "sum" in needs:
        mean_d = r["sum"] / n
        out["mean"] = mean_d + r["shift"] if "shift" in needs else mean_d
    if "shift" in needs:
        var = tf.maximum(r["sq"] / n - tf.square(mean_d), 0.0)
        out["std"], sq = tf.sqrt(var), c["n"] * var + c["n"] * tf.square(out["mean"])
        spread = tf.maximum(r["high"] - r["shift"], r["shift"] - r["low"])
        bad |= (r["sq"] < tiny) & (spread > 0)  # lost squares of deviations
        bad |= tf.square(mean_d) > _CANCELLATION * var
    if sq is not None:  # the sum of squares of x
        out["norm"] = tf.sqrt(sq)
        bad |= (sq < tiny) & (c["n"] > tf.cast(c["zeros"], n.dtype))
    for value in out.values():
        bad |= ~tf.math.is_finite(value)
    return out, bad & (c["n"] > 0)


def _careful(x: tf.Tensor, layout: Layout, c: dict, fast: dict, rows) -> dict:
    """`fast`, its `rows` recomputed from x / max|x|, the variance in 2 passes."""
    finite, n = tf.math.is_finite(x), tf.maximum(c["n"], 1.0)
    low, high = _extremes(x, finite, layout)
    largest = tf.maximum(tf.abs(low), tf.abs(high))
    scale = tf.where((c["n"] > 0) & (largest > 0), largest, tf.ones_like(largest))
    y = tf.where(finite, x, 0.0) / _per_block(scale, layout)
    sums = tf.stack([tf.reduce_sum(y, 1), tf.reduce_sum(tf.square(y), 1)], 1)
    sums = _per_tensor(sums, layout)
    deviation = tf.where(finite, y - _per_block(sums[:, 0] / n, layout), 0.0)
    var = _per_tensor(tf.reduce_sum(tf.square(deviation), 1), layout) / n
    mean, std, norm = (scale * v for v in (sums[:, 0] / n, var**0.5, sums[:, 1] ** 0.5))
    slow = {"min": low, "max": high, "mean": mean, "std": std, "norm": norm}
    return {k: tf.where(rows, slow[k], v) for k, v in fast.items()}


def _finish(s: dict, c: dict, layout: Layout, names: Sequence[str]) -> tf.Tensor:
    has, dtype = c["n"] > 0, c["n"].dtype
    nan = tf.fill(tf.shape(c["n"]), tf.constant(float("nan"), dtype))
    s = {k: tf.where(has, v, 0.0 if k == "norm" else nan) for k, v in s.items()}
    if "min" in s:
        largest = tf.maximum(tf.abs(s["min"]), tf.abs(s["max"]))
        s["max_abs"] = tf.where(has, largest, 0.0)
    sizes = tf.cast(tf.maximum(layout.sizes, 1), dtype)
    s["zero_fraction"] = tf.cast(c["zeros"], dtype) / sizes
    s["nonfinite"] = tf.cast(c["nonfinite"], dtype)
    rows = tf.stack([s[k] if k in names else nan for k in STATISTICS], 1)
    return tf.cast(rows, tf.float32)


def batched_statistics(
    tensors: Sequence[tf.Tensor | tf.IndexedSlices],
    names: Sequence[str] = STATISTICS,
) -> tf.Tensor:
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

    >>> rows = batched_statistics([tf.constant([3.0, -4.0]), tf.zeros([0])])
    >>> rows[:, 0].numpy().tolist()  # the norms
    [5.0, 0.0]
    """
    unknown = [n for n in names if n not in STATISTICS]
    if unknown:
        raise ValueError(
            f"Unknown statistic {unknown[0]!r}. Valid names: {list(STATISTICS)}. "
            f"Received: names={list(names)!r}"
        )
    if not tensors:
        return tf.zeros([0, len(STATISTICS)])
    [rows] = by_layout(tensors, functools.partial(_statistics, names=names))
    return rows


def _statistics(x: tf.Tensor, layout: Layout, names: Sequence[str]) -> tuple:
    """`batched_statistics` of the tensors of one layout, as a 1-tuple."""
    needs = set().union(*(_NEEDS.get(n, set()) for n in names))
    finite = tf.math.is_finite(x)
    counts = _counts(x, finite, layout)
    fast, rows = _fast(_reductions(x, finite, layout, needs), counts, needs)
    if fast:
        careful = functools.partial(_careful, x, layout, counts, fast, rows)
        fast = gate(tf.reduce_any(rows), careful, lambda: fast)
    return (_finish(fast, counts, layout, names),)


def batched_bucket_counts(
    tensors: Sequence[tf.Tensor | tf.IndexedSlices], buckets: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """`bucket_counts` of each tensor, as rows of two matrices.

    Args:
        tensors: As for `batched_statistics`.
        buckets: The number of buckets, a Python int >= 1.

    Returns:
        `(counts, ranges)`: int32 `[len(tensors), buckets]` and float32
        `[len(tensors), 2]`, row `i` being `bucket_counts(tensors[i], buckets)`.

    Example:

    >>> counts, ranges = batched_bucket_counts([tf.constant([0.0, 1.0, 1.0])], 2)
    >>> counts.numpy().tolist(), ranges.numpy().tolist()
    ([[1, 2]], [[0.0, 1.0]])
    """
    if not tensors:
        return tf.zeros([0, buckets], tf.int32), tf.zeros([0, 2])
    return by_layout(tensors, functools.partial(_bucket_counts, buckets=buckets))


def _bucket_counts(x: tf.Tensor, layout: Layout, buckets: int) -> tuple:
    """`batched_bucket_counts` of the tensors of one layout."""
    finite = tf.math.is_finite(x)
    low, high = _extremes(x, finite, layout)
    low, high = tf.where(low <= high, low, 0.0), tf.where(low <= high, high, 0.0)
    # The arithmetic of `bucket_counts`, element for element.
    scale = tf.maximum(tf.abs(low), tf.abs(high))
    scale = tf.where(scale > 0, scale, tf.ones_like(scale))
    width = _per_block(high / scale - low / scale, layout)
    low_b, scale_b = _per_block(low, layout), _per_block(scale, layout)
    offset = tf.where(finite, x, low_b) / scale_b - low_b / scale_b
    position = tf.math.divide_no_nan(offset, width) * buckets
    index = tf.cast(tf.minimum(tf.floor(position), buckets - 1), tf.int32)
    index = tf.where(width > 0, index, buckets - 1)
    # Non-finite elements go to an extra bucket per tensor, dropped.
    index = tf.where(finite, index, buckets) + (buckets + 1) * layout.segments[:, None]
    size, index = (layout.count + 1) * (buckets + 1), tf.reshape(index, [-1])
    counts = tf.raw_ops.DenseBincount(input=index, size=size, weights=np.zeros(0, "i4"))
    counts = tf.reshape(counts, [-1, buckets + 1])[:-1, :buckets]
    return counts, tf.cast(tf.stack([low, high], 1), tf.float32)
