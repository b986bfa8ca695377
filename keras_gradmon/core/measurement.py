"""What one summary step measures, as small dataclasses of tensors, and the
pure functions that compute them from the gradients and the weights.

Everything here is tensor math that compiles under XLA. `MonitorState`
assigns these results to its variables by field name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from keras import ops

from keras_gradmon.columns import STATISTICS, TOTALS
from keras_gradmon.core.batched import (
    batched_bucket_counts,
    batched_statistics,
    combine_norms,
)

_NAN = float("nan")

#: A tensor of the Keras backend.
Tensor = Any


def _zero() -> Tensor:
    return ops.zeros(())


def stack_totals(values: Mapping[str, Tensor | float]) -> Tensor:
    """The row's `totals` field: `values` by name (`columns.TOTALS`), as one
    float32 vector in the table's order; a total not given (its feature is
    off) is NaN.

    Example:

    >>> ops.convert_to_numpy(stack_totals({"grad_norm": 3.0}))[:2].tolist()
    [3.0, nan]
    """
    unknown = sorted(set(values) - set(TOTALS))
    if unknown:
        raise KeyError(f"No total named {unknown[0]!r}; totals: {list(TOTALS)}.")
    return ops.stack([ops.cast(values.get(name, _NAN), "float32") for name in TOTALS])


@dataclasses.dataclass(frozen=True)
class Measurement:
    """The scalar statistics of one summary step.

    Attributes:
        totals: The step-wide scalars, float32 `[len(TOTALS)]` in the
            order of `columns.TOTAL_COLUMNS` (`stack_totals`).
        groups: `[num_groups, 2]`: each group's gradient and weight norm.
        grad: `[num_variables, len(STATISTICS) + 1]` gradient statistics,
            the last column 1 where the variable had a gradient.
        weight: The same for the weights, or None.
        ratio: `[num_variables]` gradient norm / weight norm (NaN where the
            weight norm is 0 or the gradient is missing), or None.
    """

    totals: Tensor
    groups: Tensor
    grad: Tensor
    weight: Tensor | None = None
    ratio: Tensor | None = None


@dataclasses.dataclass(frozen=True)
class HistogramMeasurement:
    """Histogram bucket counts of one histogram step.

    Attributes:
        grad_counts: int32 `[num_variables, buckets]`.
        grad_range: `[num_variables, 3]`: min, max, and 1 where present.
        weight_counts, weight_range: `[num_variables, buckets]` and
            `[num_variables, 2]`, or None.
    """

    grad_counts: Tensor
    grad_range: Tensor
    weight_counts: Tensor | None = None
    weight_range: Tensor | None = None


@dataclasses.dataclass(frozen=True)
class ClipOutcome:
    """What `GradientMonitor.clip` decided for one step.

    Attributes:
        grads: The gradients to apply, in the input order (None kept):
            clipped when a clipping rule is configured, else the input.
        pre_norm: float32 global norm before clipping (Inf past float32).
        post_norm: float32 global norm after clipping.
        finite: bool, whether every gradient element is finite.
    """

    grads: list[Any]
    pre_norm: Tensor
    post_norm: Tensor
    finite: Tensor


@dataclasses.dataclass(frozen=True)
class Due:
    """Whether this step recorded scalars / histograms: a bool tensor, or a
    Python bool known when tracing (True: every step; False: never)."""

    scalars: Tensor | bool
    histograms: Tensor | bool


@dataclasses.dataclass(frozen=True)
class Processed:
    """The result of `GradientMonitor.process`: the gradients to apply,
    whether to apply them (True: always), what was recorded, and the
    weights before the update where `hold` asked for them (by row; None
    where no update ratio is recorded)."""

    grads: list[Any]
    apply: Tensor | bool
    due: Due
    before: Mapping[int, Any] | None = None


def statistics_matrices(
    parts: Sequence[Mapping[int, Tensor]],
    rows: int,
    names: Sequence[str],
    unpack_large: bool = False,
) -> list[Tensor]:
    """For each of `parts` (the gradients, the weights): `[rows,
    len(STATISTICS) + 1]`, the statistics of `part[i]` in row `i` and a
    last column of 1 (rows without a tensor are NaN with a 0), all computed
    in one batched program: its size does not grow with the number of
    tensors, so one call costs about half of two at trace and run time. The
    norm and the non-finite count are always computed (they feed the group
    and global numbers); the other statistics only when in `names`.
    `unpack_large`: as for `batched_statistics`."""
    names = sorted({"norm", "nonfinite", *names}, key=STATISTICS.index)
    orders = [sorted(part) for part in parts]
    tensors = [part[i] for part, order in zip(parts, orders) for i in order]
    computed = batched_statistics(tensors, names, unpack_large)
    matrices, start = [], 0
    for order in orders:
        rows_of_part = computed[start : start + len(order)]
        matrices.append(_placed_statistics(rows_of_part, order, rows))
        start += len(order)
    return matrices


def _placed_statistics(computed: Tensor, order: list[int], rows: int) -> Tensor:
    """The computed rows of the tensors in `order`, each at its row."""
    present = ops.ones([len(order), 1])
    filled = ops.concatenate([computed, present], 1)
    if len(order) == rows:
        return filled
    missing = ops.concatenate(
        [ops.full([1, len(STATISTICS)], _NAN), ops.zeros([1, 1])], 1
    )
    # Row i of the result: its computed row, or the missing row (index -1).
    position = {i: k for k, i in enumerate(order)}
    take = [position.get(i, len(order)) for i in range(rows)]
    return ops.take(ops.concatenate([filled, missing], 0), take, axis=0)


def combined_norms(
    matrix: Tensor, members: Sequence[Sequence[int]]
) -> tuple[Tensor, Tensor]:
    """`(total, per-group)` L2 norms from the per-variable norm column;
    missing rows (NaN) count as 0. A group of no present variable is 0."""
    norms = matrix[:, STATISTICS.index("norm")]
    norms = ops.where(ops.isnan(norms), ops.zeros_like(norms), norms)
    total = combine_norms(norms)
    groups = [
        combine_norms(ops.take(norms, list(rows), axis=0)) if rows else _zero()
        for rows in members
    ]
    stacked = ops.stack(groups) if groups else ops.zeros([0])
    return total, stacked


def nonfinite_total(matrix: Tensor) -> Tensor:
    """The number of NaN/Inf elements over the present rows."""
    counts = matrix[:, STATISTICS.index("nonfinite")]
    return ops.sum(ops.where(ops.isnan(counts), 0.0, counts))


def norm_ratio(grad: Tensor, weight: Tensor) -> Tensor:
    """Per variable, gradient norm / weight norm; NaN where the weight norm
    is not above 0 (the ratio says nothing there) or the gradient is missing.
    """
    column = STATISTICS.index("norm")
    g, w = grad[:, column], weight[:, column]
    return ops.where(w > 0, g / ops.where(w > 0, w, 1.0), _NAN)


def histogram_matrices(
    parts: Sequence[Mapping[int, Tensor]],
    rows: int,
    buckets: int,
    unpack_large: bool = False,
) -> list[tuple[Tensor, Tensor]]:
    """For each of `parts` (the gradients, the weights): `(counts [rows,
    buckets], ranges [rows, 3])` of `part[i]` in row `i`, the last range
    column 1 where row i has a tensor, else 0; all bucket counts computed in
    one batched program (`batched_bucket_counts`, `unpack_large` passed)."""
    orders = [sorted(part) for part in parts]
    tensors = [part[i] for part, order in zip(parts, orders) for i in order]
    counts, ranges = batched_bucket_counts(tensors, buckets, unpack_large)
    matrices, start = [], 0
    for order in orders:
        end = start + len(order)
        part = _placed_histograms(counts[start:end], ranges[start:end], order, rows)
        matrices.append(part)
        start = end
    return matrices


def _placed_histograms(
    counts: Tensor, ranges: Tensor, order: list[int], rows: int
) -> tuple[Tensor, Tensor]:
    buckets = int(counts.shape[1])
    ranges = ops.concatenate([ranges, ops.ones([len(order), 1])], 1)
    if len(order) == rows:
        return counts, ranges
    counts = ops.concatenate([counts, ops.zeros([1, buckets], "int32")], 0)
    ranges = ops.concatenate([ranges, ops.zeros([1, 3])], 0)
    position = {i: k for k, i in enumerate(order)}
    take = [position.get(i, len(order)) for i in range(rows)]
    return ops.take(counts, take, axis=0), ops.take(ranges, take, axis=0)


def scalar_measurement(
    grads: Mapping[int, Tensor],
    weights: Mapping[int, Tensor] | None,
    count: int,
    names: Sequence[str],
    members: Sequence[Sequence[int]],
    extra: Mapping[str, Tensor | float],
    unpack_large: bool = False,
) -> Measurement:
    """The scalar statistics of one step: per variable, per group, global.

    Args:
        grads: `{row: gradient}` of the variables that have one.
        weights: `{row: weight}` of every variable, or None for no weight
            statistics.
        count: The number of variables.
        names: The per-variable statistics to compute.
        members: The rows of each group.
        extra: The totals that come from elsewhere, by name: the clip
            numbers, `skipped_steps`, `loss_scale` and the every-step
            signals'.
        unpack_large: As for `batched_statistics`: for a program that
            measures at every step.
    """
    parts = [grads] if weights is None else [grads, weights]
    grad, *weight_part = statistics_matrices(parts, count, names, unpack_large)
    grad_total, grad_groups = combined_norms(grad, members)
    weight = ratio = None
    weight_total, weight_groups = _zero(), ops.zeros_like(grad_groups)
    if weights is not None:
        [weight] = weight_part
        weight_total, weight_groups = combined_norms(weight, members)
        ratio = norm_ratio(grad, weight)
    totals = stack_totals(
        dict(
            extra,
            grad_norm=grad_total,
            weight_norm=weight_total,
            grad_nonfinite=nonfinite_total(grad),
            grad_missing=float(count - len(grads)),
        )
    )
    groups = ops.stack([grad_groups, weight_groups], axis=1)
    return Measurement(totals, groups, grad, weight, ratio)


def histogram_measurement(
    grads: Mapping[int, Tensor],
    weights: Mapping[int, Tensor] | None,
    count: int,
    buckets: int,
    unpack_large: bool = False,
) -> HistogramMeasurement:
    """The histogram bucket counts of one step (weights' too, if given)."""
    parts = [grads] if weights is None else [grads, weights]
    (counts, ranges), *weight_part = histogram_matrices(
        parts, count, buckets, unpack_large
    )
    if weights is None:
        return HistogramMeasurement(counts, ranges)
    [(weight_counts, weight_ranges)] = weight_part
    return HistogramMeasurement(counts, ranges, weight_counts, weight_ranges[:, :2])
