"""Statistics of many tensors at once, in a program that does not grow with
their number: the tensors, padded with NaN (ignored like all non-finite
elements) to whole blocks, form one `[blocks, block]` matrix reduced by rows,
then by tensor with segment ids (`layout.py`: static ones; tensors of a size
known only at run time form a second matrix, its layout computed at run
time). Each statistic is a registered `Statistic` (`registry.py`, one module
each in `statistics/`); here they are computed together: one shared pass
takes the reductions they need (`reductions.Reductions`), each finishes its
value from them, and one conditional recomputes, scaled and in two passes
(`reductions.Careful`), the rows that pass cannot be trusted with. Written
in `keras.ops`, the same on every Keras backend; what differs (the
conditional, bin counts, densifying) is in `keras_gradmon.backend`."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from keras import ops

from keras_gradmon import backend
from keras_gradmon.backend import Tensor
from keras_gradmon.schema import STATISTICS
from keras_gradmon.stats import registry
from keras_gradmon.stats.layout import Layout, by_layout
from keras_gradmon.stats.reductions import (
    Careful,
    Reductions,
    extremes,
    per_block,
)
from keras_gradmon.stats.statistic import Statistic


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
        names: Which statistics to compute: registered names
            (`keras_gradmon.stats.registry`), usually of `STATISTICS`.

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
    [rows] = by_layout(tensors, compute)
    return rows


def _statistics(
    x: Tensor, layout: Layout, columns: Sequence[Statistic], names: set[str]
) -> tuple:
    """`batched_statistics` of the tensors of one layout, as a 1-tuple: the
    statistics `names` and, free, the others of `columns` their reductions
    serve (their rows are flagged for the careful path too)."""
    needs = set().union(*(s.reductions for s in columns if s.name in names))
    computed = [s for s in columns if s.reductions <= needs]
    terms = {s.name: s.term for s in computed if s.term is not None}
    r = Reductions(x, layout, needs, terms)
    values = {s.name: s.fast(r) for s in computed}
    careful = [s for s in computed if s.careful is not None]
    if careful:
        fast = {s.name: values[s.name] for s in careful}
        rows = _untrusted(r, careful, fast)
        recompute = functools.partial(_careful, x, layout, r, careful, fast, rows)
        values.update(backend.cond(ops.any(rows), recompute, lambda: fast))
    return (_finish(values, r, computed, columns, names),)


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
    x: Tensor, layout: Layout, r: Reductions, careful: list, fast: dict, rows
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

    >>> import numpy as np
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
    low, high = extremes(x, finite, layout)
    low, high = ops.where(low <= high, low, 0.0), ops.where(low <= high, high, 0.0)
    # The arithmetic of `bucket_counts`, element for element.
    scale = ops.maximum(ops.abs(low), ops.abs(high))
    scale = ops.where(scale > 0, scale, ops.ones_like(scale))
    width = per_block(high / scale - low / scale, layout)
    low_b, scale_b = per_block(low, layout), per_block(scale, layout)
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
