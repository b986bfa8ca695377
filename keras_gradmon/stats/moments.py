"""Per-tensor statistics: norm, moments, extremes, sparsity, finiteness.

The statistics describe the *finite* elements of a tensor; NaN and Inf
elements are counted in `nonfinite` instead of silently turning every other
number into NaN. Computation happens in float32 (float64 for float64 input).

Only the requested statistics are computed, in a single pass over the tensor
(every reduction reads it once). When that pass cannot be trusted (squares
that overflow or underflow float32, or a mean so large against the spread
that E[x^2] - E[x]^2 cancels), a graph conditional recomputes with a scaled,
two-pass algorithm, so values near the float32 limit (1e30) and tiny ones
(1e-30) come out right.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

#: The statistics computed for every tensor, in storage order.
STATISTICS: tuple[str, ...] = (
    "norm",
    "mean",
    "std",
    "min",
    "max",
    "max_abs",
    "zero_fraction",
    "nonfinite",
)

# The reductions each statistic needs.
_NEEDS = {
    "norm": {"sum_sq"},
    # Squares too: their overflow check guards the sum as well.
    "mean": {"sum", "sum_sq", "count"},
    "std": {"sum", "sum_sq", "count"},
    "min": {"extremes", "count"},
    "max": {"extremes", "count"},
    "max_abs": {"extremes", "count"},
    "zero_fraction": {"zeros"},
    "nonfinite": {"count"},
}
# Below this, a sum of squares may have lost its small terms to underflow
# (1e-19 ** 2 is below float32's smallest normal number).
_TINY_SUM_SQ = 1e-30
# Above this mean^2 / variance ratio, E[x^2] - E[x]^2 loses too many digits
# (its relative error is about float32 eps times the ratio; found by a test).
_CANCELLATION = 1e2


def _compute_dtype(dtype: tf.DType) -> tf.DType:
    return tf.float64 if dtype == tf.float64 else tf.float32


def tensor_statistics(
    x: tf.Tensor, names: Sequence[str] = STATISTICS
) -> dict[str, tf.Tensor]:
    """Statistics of all elements of `x`, as scalar tensors.

    Args:
        x: A tensor of any shape and floating dtype (float16, bfloat16,
            float32, float64). `tf.IndexedSlices` are densified first.
        names: Which statistics to compute (a subset of `STATISTICS`).

    Returns:
        A dict from each of `names` to a scalar float tensor (float64 for
        float64 input, else float32). `mean`, `std`, `min` and `max` are NaN
        when `x` has no finite element; `norm` and `max_abs` are then 0.

    Example:

    >>> s = tensor_statistics(tf.constant([3.0, -4.0, 0.0, float("nan")]))
    >>> float(s["norm"]), float(s["nonfinite"]), float(s["zero_fraction"])
    (5.0, 1.0, 0.25)
    """
    unknown = [n for n in names if n not in STATISTICS]
    if unknown:
        raise ValueError(
            f"Unknown statistic {unknown[0]!r}. Valid names: {list(STATISTICS)}. "
            f"Received: names={list(names)!r}"
        )
    if isinstance(x, tf.IndexedSlices):
        x = tf.convert_to_tensor(x)
    dtype = _compute_dtype(x.dtype)
    x = tf.reshape(tf.cast(x, dtype), [-1])
    needs = set().union(*(_NEEDS[n] for n in names))
    if dtype == tf.float64 or not needs & {"sum_sq"}:
        # float64 has the range for one pass; without squares nothing overflows.
        reductions = _reductions(x, needs) if dtype != tf.float64 else _scaled(x, needs)
        return _finish(x, reductions, names)
    fast = _with_scale(_reductions(x, needs), needs)
    # An all-zero tensor takes the careful path too: cheap to check, rare.
    careful = tf.logical_or(
        tf.logical_not(tf.math.is_finite(fast["sum_sq"])),
        fast["sum_sq"] < _TINY_SUM_SQ,
    )
    if "std" in names:
        careful = tf.logical_or(careful, _cancels(fast))
    reductions = tf.cond(careful, lambda: _scaled(x, needs), lambda: fast)
    return _finish(x, reductions, names)


def _cancels(r: dict[str, tf.Tensor]) -> tf.Tensor:
    mean = r["sum"] / tf.maximum(r["count"], 1.0)
    return tf.square(mean) > _CANCELLATION * r["var_y"]


def _with_scale(r: dict[str, tf.Tensor], needs: set[str]) -> dict[str, tf.Tensor]:
    # The one-pass results in the form of `_scaled`'s (scale 1).
    r = {**r, "scale": tf.ones_like(r["sum_sq"])}
    if "count" in needs and "sum" in needs:
        n = tf.maximum(r["count"], 1.0)
        r["var_y"] = tf.maximum(r["sum_sq"] / n - tf.square(r["sum"] / n), 0.0)
    return r


def _reductions(x: tf.Tensor, needs: set[str]) -> dict[str, tf.Tensor]:
    # Every reduction reads x once; XLA fuses the elementwise parts into them.
    finite = tf.math.is_finite(x)
    x_finite = tf.where(finite, x, tf.zeros_like(x))
    out = {}
    if "count" in needs:
        out["count"] = tf.reduce_sum(tf.cast(finite, x.dtype))
    if "sum" in needs:
        out["sum"] = tf.reduce_sum(x_finite)
    if "sum_sq" in needs:
        out["sum_sq"] = tf.reduce_sum(tf.square(x_finite))
    if "extremes" in needs:
        inf = tf.constant(float("inf"), x.dtype)
        out["min"] = tf.reduce_min(tf.where(finite, x, inf))
        out["max"] = tf.reduce_max(tf.where(finite, x, -inf))
    if "zeros" in needs:
        out["zeros"] = tf.reduce_sum(tf.cast(tf.equal(x, 0.0), x.dtype))
    return out


def _scaled(x: tf.Tensor, needs: set[str]) -> dict[str, tf.Tensor]:
    # The same reductions of x / max|x| (in [-1, 1]), so squares neither
    # overflow nor underflow, with "var" from a second pass around the mean.
    out = _reductions(x, needs - {"sum", "sum_sq"})
    finite = tf.math.is_finite(x)
    abs_max = tf.reduce_max(tf.where(finite, tf.abs(x), tf.zeros_like(x)))
    scale = tf.where(abs_max > 0, abs_max, tf.ones_like(abs_max))
    y = tf.where(finite, x, tf.zeros_like(x)) / scale
    sum_y = tf.reduce_sum(y)
    if "sum" in needs:
        out["sum"] = sum_y  # of x / scale, like every sum here
    if "sum_sq" in needs:
        # Kept as (scale, sum of y^2): its square may not fit in float32.
        out["sum_sq"] = tf.reduce_sum(tf.square(y))
        out["scale"] = scale
        if "count" in needs and "sum" in needs:
            n = tf.maximum(out["count"], 1.0)
            deviation = tf.where(finite, y - sum_y / n, tf.zeros_like(y))
            out["var_y"] = tf.reduce_sum(tf.square(deviation)) / n
    return out


def _finish(
    x: tf.Tensor, r: dict[str, tf.Tensor], names: Sequence[str]
) -> dict[str, tf.Tensor]:
    nan = tf.constant(float("nan"), x.dtype)
    size = tf.cast(tf.size(x), x.dtype)
    count = r.get("count")
    n = tf.maximum(count, 1.0) if count is not None else None
    has_finite = count > 0 if count is not None else None
    out = {}
    for name in names:
        if name == "norm":
            value = r["scale"] * tf.sqrt(r["sum_sq"])
        elif name == "mean":
            value = tf.where(has_finite, r["scale"] * (r["sum"] / n), nan)
        elif name == "std":
            value = tf.where(has_finite, r["scale"] * tf.sqrt(r["var_y"]), nan)
        elif name in ("min", "max"):
            value = tf.where(has_finite, r[name], nan)
        elif name == "max_abs":
            largest = tf.maximum(tf.abs(r["min"]), tf.abs(r["max"]))
            value = tf.where(has_finite, largest, tf.zeros_like(largest))
        elif name == "zero_fraction":
            value = r["zeros"] / tf.maximum(size, 1.0)
        else:  # nonfinite
            value = size - count
        out[name] = value
    return out


def stack_statistics(x: tf.Tensor, names: Sequence[str] = STATISTICS) -> tf.Tensor:
    """The statistics of `x` as a float32 vector in `STATISTICS` order.

    Statistics not in `names` are not computed and read NaN.

    Example:

    >>> stack_statistics(tf.ones([4])).shape
    TensorShape([8])
    """
    stats = tensor_statistics(x, names)
    nan = tf.constant(float("nan"), tf.float32)
    return tf.stack(
        [tf.cast(stats[n], tf.float32) if n in stats else nan for n in STATISTICS]
    )
