"""Statistics of many tensors at once, in a program that does not grow with
their number.

The tensors are flattened, padded with NaN to a multiple of a block size and
concatenated into one `[blocks, block]` matrix; row reductions give partial
results per block, segment reductions with static ids combine them per
tensor. NaN padding is invisible to every statistic (they ignore non-finite
elements) and subtracted from the non-finite count.

One pass per reduction, in float32 (float64 for all if any input is float64).
Sums are taken around a shift, the median of three elements of each tensor,
so that the variance does not cancel when the mean is large against the
spread. One graph conditional for all tensors recomputes, scaled and in two
passes, the rows whose one-pass results cannot be trusted (squares that
overflow or underflow, cancellation). Every reduction reads a `tf.where`:
XLA:CPU (TF 2.21) then runs it as a vectorized library reduction, several
times faster than its generic one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_gradmon.stats.moments import STATISTICS

# Per-block code sum: 1 per zero, _NONFINITE per non-finite element; exact in
# float32 while block * (_NONFINITE + 1) < 2**24.
_NONFINITE = 4096
_MAX_BLOCK = 2048
# Below this (times the dtype's smallest normal) a sum of squares may have
# lost terms to underflow; above this (mean - shift)^2 / variance, too many
# digits cancel (the same limits as `tensor_statistics`).
_TINY = 1e8
_CANCELLATION = 1e2


class _Layout(NamedTuple):
    """Where each tensor sits in the `[blocks, block]` matrix (static)."""

    block: int
    sizes: np.ndarray  # [V] elements of each tensor
    pads: np.ndarray  # [V] NaN padding after each tensor
    segments: np.ndarray  # [blocks] tensor of each block; V for the spare one
    samples: np.ndarray  # [V, 3] flat positions of the shift candidates


def _layout(sizes: Sequence[int]) -> _Layout:
    sizes = np.asarray(sizes, np.int64)
    count = max(len(sizes), 1)
    # Blocks of a power of two, small enough that padding stays below ~25%.
    target = max(int(sizes.sum()) // (4 * count), 1)
    block = int(min(max(2 ** int(np.log2(target)), 64), _MAX_BLOCK))
    per = -(-sizes // block)
    pads = per * block - sizes
    # A spare all-NaN block at the end: gathers of empty tensors land there.
    segments = np.append(np.repeat(np.arange(len(sizes)), per), len(sizes))
    starts = np.concatenate([[0], np.cumsum(per)[:-1]]).astype(np.int64) * block
    middle = starts + sizes // 2
    last = starts + np.maximum(sizes - 1, 0)
    spare = int(per.sum()) * block
    samples = np.stack([starts, middle, last], 1)
    samples[sizes == 0] = spare
    return _Layout(block, sizes, pads, segments.astype(np.int32), samples)


def _prepare(tensors: Sequence) -> tuple[tf.Tensor, _Layout]:
    """The `[blocks, block]` matrix of `tensors` and its layout."""
    dense = [tf.convert_to_tensor(t) for t in tensors]  # densifies IndexedSlices
    if any(t.shape.num_elements() is None for t in dense):
        raise ValueError(f"Batched statistics need static shapes. Received: {dense}")
    dtype = tf.float64 if any(t.dtype == tf.float64 for t in dense) else tf.float32
    layout = _layout([t.shape.num_elements() for t in dense])
    nan = tf.constant(float("nan"), dtype)
    parts = []
    # NaN constants between the tensors, not tf.pad: XLA then copies with memcpy.
    for t, pad in zip(dense, layout.pads):
        parts.append(tf.reshape(tf.cast(t, dtype), [-1]))
        parts += [tf.fill([int(pad)], nan)] if pad else []
    parts.append(tf.fill([layout.block], nan))
    return tf.reshape(tf.concat(parts, 0), [-1, layout.block]), layout


def _per_tensor(partials: tf.Tensor, layout: _Layout, op=tf.math.unsorted_segment_sum):
    return op(partials, layout.segments, len(layout.sizes) + 1)[:-1]


def _per_block(values: tf.Tensor, layout: _Layout) -> tf.Tensor:
    spare = tf.zeros([1], values.dtype)
    return tf.gather(tf.concat([values, spare], 0), layout.segments)[:, None]


def _extremes(x: tf.Tensor, finite: tf.Tensor, layout: _Layout) -> tuple:
    """Min and max of the finite elements of each tensor (low > high if none)."""
    inf = tf.constant(float("inf"), x.dtype)
    low = tf.reduce_min(tf.where(finite, x, inf), 1)
    high = tf.reduce_max(tf.where(finite, x, -inf), 1)
    return (
        _per_tensor(low, layout, tf.math.unsorted_segment_min),
        _per_tensor(high, layout, tf.math.unsorted_segment_max),
    )


def _shift(x: tf.Tensor, layout: _Layout) -> tuple[tf.Tensor, tf.Tensor]:
    """The median of the finite ones of three elements of each tensor (0 if
    none is), and whether there was one."""
    samples = tf.gather(tf.reshape(x, [-1]), layout.samples)
    finite = tf.math.is_finite(samples)
    inf = tf.constant(float("inf"), x.dtype)
    ordered = tf.sort(tf.where(finite, samples, inf), axis=1)
    found = tf.reduce_sum(tf.cast(finite, tf.int32), 1)
    middle = tf.gather(ordered, tf.maximum(found - 1, 0) // 2, batch_dims=1)
    return tf.where(found > 0, middle, tf.zeros_like(middle)), found > 0


def _counts(x: tf.Tensor, finite: tf.Tensor, layout: _Layout) -> dict:
    zero = tf.cast(tf.equal(x, 0.0), x.dtype)
    code = tf.reduce_sum(tf.where(finite, zero, _NONFINITE * tf.ones_like(x)), 1)
    nonfinite = tf.floor(code / _NONFINITE)
    ints = tf.cast(tf.stack([nonfinite, code - _NONFINITE * nonfinite], 1), tf.int32)
    totals = _per_tensor(ints, layout)
    nonfinite = totals[:, 0] - layout.pads.astype(np.int32)
    count = tf.cast(layout.sizes - nonfinite, x.dtype)
    return {"n": count, "nonfinite": nonfinite, "zeros": totals[:, 1]}


def _reductions(x: tf.Tensor, layout: _Layout, needs: set[str]) -> dict:
    """The one-pass per-tensor sums (around the shift) and extremes."""
    finite, zero, r = tf.math.is_finite(x), tf.zeros_like(x), {}
    d = x
    if needs & {"shift", "extremes"}:
        r["shift"], r["found"] = _shift(x, layout)
        k = _per_block(r["shift"], layout)
        if "shift" in needs:
            d = x - k
        # The tensor's own element in place of non-finite ones: neutral.
        held = tf.where(finite, x, k)
        low, high = tf.reduce_min(held, 1), tf.reduce_max(held, 1)
        r["low"] = _per_tensor(low, layout, tf.math.unsorted_segment_min)
        r["high"] = _per_tensor(high, layout, tf.math.unsorted_segment_max)
    columns = {"sum": d, "sq": d * d}
    names = [n for n in columns if n in needs]
    if names:
        sums = [tf.reduce_sum(tf.where(finite, columns[n], zero), 1) for n in names]
        sums = _per_tensor(tf.stack(sums, 1), layout)
        r.update({n: sums[:, i] for i, n in enumerate(names)})
    return r


def _fast(r: dict, c: dict, needs: set[str]) -> tuple[dict, tf.Tensor]:
    """Statistics from the one-pass sums, and which rows need the careful path."""
    n = tf.maximum(c["n"], 1.0)
    shifted = "shift" in needs
    out, bad = {}, tf.zeros_like(c["n"], tf.bool)
    if "extremes" in needs:
        out["min"], out["max"] = r["low"], r["high"]
        bad = tf.logical_not(r["found"])
    if "sum" in needs:
        mean_d = r["sum"] / n
        out["mean"] = mean_d + r["shift"] if shifted else mean_d
    if shifted:
        var = tf.maximum(r["sq"] / n - tf.square(mean_d), 0.0)
        out["std"] = tf.sqrt(var)
        out["norm"] = tf.sqrt(c["n"] * var + c["n"] * tf.square(out["mean"]))
        spread = tf.maximum(r["high"] - r["shift"], r["shift"] - r["low"])
        bad |= tf.square(mean_d) > _CANCELLATION * var
    elif "sq" in needs:
        out["norm"] = tf.sqrt(r["sq"])
        spread = c["n"] - tf.cast(c["zeros"], n.dtype)
    if "sq" in needs:
        tiny = _TINY * np.finfo(n.dtype.as_numpy_dtype).tiny
        bad |= tf.logical_and(r["sq"] < tiny, spread > 0)
    for value in out.values():
        bad |= tf.logical_not(tf.math.is_finite(value))
    return out, tf.logical_and(bad, c["n"] > 0)


def _careful(x: tf.Tensor, layout: _Layout, c: dict, needs: set[str]) -> dict:
    """The statistics of x / max|x| by tensor, the variance in a second pass."""
    finite = tf.math.is_finite(x)
    out = dict(zip(["min", "max"], _extremes(x, finite, layout)))
    largest = tf.maximum(tf.abs(out["min"]), tf.abs(out["max"]))
    scale = tf.where((c["n"] > 0) & (largest > 0), largest, tf.ones_like(largest))
    y = tf.where(finite, x, tf.zeros_like(x)) / _per_block(scale, layout)
    sums = tf.stack([tf.reduce_sum(y, 1), tf.reduce_sum(tf.square(y), 1)], 1)
    sums = _per_tensor(sums, layout)
    n = tf.maximum(c["n"], 1.0)
    out["mean"] = scale * (sums[:, 0] / n)
    out["norm"] = scale * tf.sqrt(sums[:, 1])
    if "shift" in needs:
        deviation = tf.where(finite, y - _per_block(sums[:, 0] / n, layout), 0.0)
        var = _per_tensor(tf.reduce_sum(tf.square(deviation), 1), layout) / n
        out["std"] = scale * tf.sqrt(var)
    return out


# The reductions each statistic needs ("shift": sums around a shift).
_NEEDS = {"norm": {"sq"}, "mean": {"sum"}, "std": {"sum", "sq", "shift", "extremes"}}
_NEEDS.update({name: {"extremes"} for name in ("min", "max", "max_abs")})


def _check_names(names: Sequence[str]) -> set[str]:
    unknown = [n for n in names if n not in STATISTICS]
    if unknown:
        raise ValueError(
            f"Unknown statistic {unknown[0]!r}. Valid names: {list(STATISTICS)}. "
            f"Received: names={list(names)!r}"
        )
    return set().union(*(_NEEDS.get(n, set()) for n in names))


def _finish(s: dict, c: dict, layout: _Layout, names: Sequence[str]) -> tf.Tensor:
    dtype = c["n"].dtype
    has = c["n"] > 0
    nan = tf.fill(tf.shape(c["n"]), tf.constant(float("nan"), dtype))
    s = {k: tf.where(has, v, nan) for k, v in s.items()}
    if "min" in s:
        largest = tf.maximum(tf.abs(s["min"]), tf.abs(s["max"]))
        s["max_abs"] = tf.where(has, largest, tf.zeros_like(largest))
    if "norm" in s:
        s["norm"] = tf.where(has, s["norm"], tf.zeros_like(nan))
    size = tf.constant(np.maximum(layout.sizes, 1), dtype)
    s["zero_fraction"] = tf.cast(c["zeros"], dtype) / size
    s["nonfinite"] = tf.cast(c["nonfinite"], dtype)
    columns = [s[n] if n in names else nan for n in STATISTICS]
    return tf.cast(tf.stack(columns, 1), tf.float32)


def batched_statistics(
    tensors: Sequence[tf.Tensor | tf.IndexedSlices],
    names: Sequence[str] = STATISTICS,
) -> tf.Tensor:
    """The statistics of each tensor, as rows of one matrix.

    Args:
        tensors: Tensors of static shape and floating dtype (half precision
            is widened to float32; if any is float64, all are computed in
            float64). `tf.IndexedSlices` are densified.
        names: Which statistics to compute (a subset of `STATISTICS`).

    Returns:
        A float32 `[len(tensors), len(STATISTICS)]` matrix whose row `i` is
        `stack_statistics(tensors[i], names)` within rounding: statistics
        of the finite elements, NaN for statistics not in `names`.

    Example:

    >>> rows = batched_statistics([tf.constant([3.0, -4.0]), tf.zeros([0])])
    >>> rows[:, 0].numpy().tolist()  # the norms
    [5.0, 0.0]
    """
    needs = _check_names(names)
    if not tensors:
        return tf.zeros([0, len(STATISTICS)])
    x, layout = _prepare(tensors)
    counts = _counts(x, tf.math.is_finite(x), layout)
    fast, careful = _fast(_reductions(x, layout, needs), counts, needs)
    if not fast:
        return _finish(fast, counts, layout, names)

    def recompute() -> dict:
        slow = _careful(x, layout, counts, needs)
        return {k: tf.where(careful, slow[k], v) for k, v in fast.items()}

    fast = tf.cond(tf.reduce_any(careful), recompute, lambda: fast)
    return _finish(fast, counts, layout, names)


def batched_bucket_counts(
    tensors: Sequence[tf.Tensor | tf.IndexedSlices], buckets: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """`bucket_counts` of each tensor, as rows of two matrices.

    Args:
        tensors: As for `batched_statistics` (float64 if any is float64).
        buckets: The number of buckets, a Python int >= 1.

    Returns:
        `(counts, ranges)`: int32 `[len(tensors), buckets]` and float32
        `[len(tensors), 2]`, row `i` equal to `bucket_counts(tensors[i],
        buckets)`: TensorBoard's equal-width buckets over [min, max] of the
        finite elements.

    Example:

    >>> counts, ranges = batched_bucket_counts([tf.constant([0.0, 1.0, 1.0])], 2)
    >>> counts.numpy().tolist(), ranges.numpy().tolist()
    ([[1, 2]], [[0.0, 1.0]])
    """
    if not tensors:
        return tf.zeros([0, buckets], tf.int32), tf.zeros([0, 2])
    x, layout = _prepare(tensors)
    finite = tf.math.is_finite(x)
    low, high = _extremes(x, finite, layout)
    has = low <= high
    low, high = tf.where(has, low, 0.0), tf.where(has, high, 0.0)
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
    counts = tf.raw_ops.DenseBincount(
        input=tf.reshape(index, [-1]),
        size=(len(layout.sizes) + 1) * (buckets + 1),
        weights=tf.zeros([0], tf.int32),
    )
    counts = tf.reshape(counts, [-1, buckets + 1])[:-1, :buckets]
    return counts, tf.cast(tf.stack([low, high], 1), tf.float32)


def batched_global_norm(
    tensors: Sequence[tf.Tensor | tf.IndexedSlices | None],
) -> tuple[tf.Tensor, tf.Tensor]:
    """The L2 norm of all elements together, safe from overflow.

    The common case is `tf.linalg.global_norm(tensors)` itself (bit for bit,
    with its conventions: None is skipped, `tf.IndexedSlices` count their
    values). Only when that is not finite, a conditional tells NaN or Inf
    elements from squares that overflowed, and recomputes the latter scaled,
    in float64: finite float32 tensors can have a norm above float32's max.

    Args:
        tensors: Tensors of floating dtype; of different dtypes, they are
            cast to float32 (float64 if any is) first.

    Returns:
        `(norm, all_finite)`: a float64 scalar (cast to float32 it is
        `tf.linalg.global_norm`'s value; NaN or Inf as that if an element is
        not finite) and whether every element is finite.

    Example:

    >>> norm, finite = batched_global_norm([tf.constant([3e38]), tf.constant([3e38])])
    >>> round(float(norm) / 1e38, 4), bool(finite)  # above float32's max
    (4.2426, True)
    """
    values = [
        tf.convert_to_tensor(t.values if isinstance(t, tf.IndexedSlices) else t)
        for t in tensors
        if t is not None
    ]
    if not values:
        return tf.constant(0.0, tf.float64), tf.constant(True)
    dtypes = {v.dtype for v in values}
    if len(dtypes) > 1 or dtypes - {tf.float32, tf.float64}:
        wide = tf.float64 if tf.float64 in dtypes else tf.float32
        values = [tf.cast(v, wide) for v in values]
    fast = tf.linalg.global_norm(values)

    def rescue() -> tuple[tf.Tensor, tf.Tensor]:
        flat = tf.concat([tf.reshape(tf.cast(v, tf.float64), [-1]) for v in values], 0)
        finite = tf.math.is_finite(flat)
        largest = tf.reduce_max(tf.where(finite, tf.abs(flat), 0.0))
        scale = tf.where(largest > 0, largest, 1.0)
        norm = scale * tf.sqrt(tf.reduce_sum(tf.square(flat / scale)))
        all_finite = tf.reduce_all(finite)
        return tf.where(all_finite, norm, tf.cast(fast, tf.float64)), all_finite

    return tf.cond(
        tf.math.is_finite(fast),
        lambda: (tf.cast(fast, tf.float64), tf.constant(True)),
        rescue,
    )
