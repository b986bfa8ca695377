"""What one summary step measures, as small dataclasses of tensors, and the
pure functions that compute them from the gradients and the weights.

Everything here is tensor math that compiles under XLA. `MonitorState`
assigns these results to its variables by field name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from keras_gradmon.schema import STATISTICS, TOTALS
from keras_gradmon.stats import (
    batched_bucket_counts,
    batched_statistics,
    combine_norms,
)

_NAN = float("nan")


@dataclasses.dataclass(frozen=True)
class Totals:
    """The step-wide scalars (see `TOTALS`), float32 scalar tensors."""

    grad_norm: tf.Tensor
    weight_norm: tf.Tensor
    grad_nonfinite: tf.Tensor
    grad_missing: tf.Tensor
    clip_pre_norm: tf.Tensor
    clip_post_norm: tf.Tensor
    clip_scale: tf.Tensor
    clip_fraction: tf.Tensor
    skipped_steps: tf.Tensor
    loss_scale: tf.Tensor

    def stack(self) -> tf.Tensor:
        """The values as one float32 vector, in `TOTALS` order."""
        return tf.stack([tf.cast(getattr(self, n), tf.float32) for n in TOTALS])


@dataclasses.dataclass(frozen=True)
class Measurement:
    """The scalar statistics of one summary step.

    Attributes:
        totals: The step-wide scalars.
        groups: `[num_groups, 2]`: each group's gradient and weight norm.
        grad: `[num_variables, len(STATISTICS) + 1]` gradient statistics,
            the last column 1 where the variable had a gradient.
        weight: The same for the weights, or None.
        ratio: `[num_variables]` gradient norm / weight norm (NaN where the
            weight norm is 0 or the gradient is missing), or None.
    """

    totals: Totals
    groups: tf.Tensor
    grad: tf.Tensor
    weight: tf.Tensor | None = None
    ratio: tf.Tensor | None = None


@dataclasses.dataclass(frozen=True)
class HistogramMeasurement:
    """Histogram bucket counts of one histogram step.

    Attributes:
        grad_counts: int32 `[num_variables, buckets]`.
        grad_range: `[num_variables, 3]`: min, max, and 1 where present.
        weight_counts, weight_range: `[num_variables, buckets]` and
            `[num_variables, 2]`, or None.
    """

    grad_counts: tf.Tensor
    grad_range: tf.Tensor
    weight_counts: tf.Tensor | None = None
    weight_range: tf.Tensor | None = None


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
    pre_norm: tf.Tensor
    post_norm: tf.Tensor
    finite: tf.Tensor


@dataclasses.dataclass(frozen=True)
class Due:
    """Whether this step recorded scalars / histograms: a bool tensor, or a
    Python bool known when tracing (True: every step; False: never)."""

    scalars: tf.Tensor | bool
    histograms: tf.Tensor | bool


@dataclasses.dataclass(frozen=True)
class Processed:
    """The result of `GradientMonitor.process`: the gradients to apply,
    whether to apply them (True: always), and what was recorded."""

    grads: list[Any]
    apply: tf.Tensor | bool
    due: Due


def statistics_matrices(
    parts: Sequence[Mapping[int, tf.Tensor]], rows: int, names: Sequence[str]
) -> list[tf.Tensor]:
    """`statistics_matrix` of each of `parts` (the gradients, the weights),
    all computed in one batched program: its size does not grow with the
    number of tensors, so one call costs about half of two at trace and
    run time."""
    names = sorted({"norm", "nonfinite", *names}, key=STATISTICS.index)
    orders = [sorted(part) for part in parts]
    tensors = [part[i] for part, order in zip(parts, orders) for i in order]
    computed = batched_statistics(tensors, names)
    matrices, start = [], 0
    for order in orders:
        rows_of_part = computed[start : start + len(order)]
        matrices.append(_placed_statistics(rows_of_part, order, rows))
        start += len(order)
    return matrices


def statistics_matrix(
    tensors: Mapping[int, tf.Tensor], rows: int, names: Sequence[str]
) -> tf.Tensor:
    """`[rows, len(STATISTICS) + 1]`: the statistics of `tensors[i]` in row
    `i` and a last column of 1; rows without a tensor are NaN with a 0.

    The norm and the non-finite count are always computed (they feed the
    group and global numbers); the other statistics only when in `names`.
    """
    return statistics_matrices([tensors], rows, names)[0]


def _placed_statistics(computed: tf.Tensor, order: list[int], rows: int) -> tf.Tensor:
    """The computed rows of the tensors in `order`, each at its row."""
    present = tf.ones([len(order), 1])
    filled = tf.concat([computed, present], 1)
    if len(order) == rows:
        return filled
    missing = tf.concat([tf.fill([1, len(STATISTICS)], _NAN), tf.zeros([1, 1])], 1)
    # Row i of the result: its computed row, or the missing row (index -1).
    position = {i: k for k, i in enumerate(order)}
    take = [position.get(i, len(order)) for i in range(rows)]
    return tf.gather(tf.concat([filled, missing], 0), take)


def combined_norms(
    matrix: tf.Tensor, members: Sequence[Sequence[int]]
) -> tuple[tf.Tensor, tf.Tensor]:
    """`(total, per-group)` L2 norms from the per-variable norm column;
    missing rows (NaN) count as 0. A group of no present variable is 0."""
    norms = matrix[:, STATISTICS.index("norm")]
    norms = tf.where(tf.math.is_nan(norms), tf.zeros_like(norms), norms)
    total = combine_norms(norms)
    groups = [
        combine_norms(tf.gather(norms, list(rows))) if rows else tf.constant(0.0)
        for rows in members
    ]
    stacked = tf.stack(groups) if groups else tf.zeros([0])
    return total, stacked


def nonfinite_total(matrix: tf.Tensor) -> tf.Tensor:
    """The number of NaN/Inf elements over the present rows."""
    counts = matrix[:, STATISTICS.index("nonfinite")]
    return tf.reduce_sum(tf.where(tf.math.is_nan(counts), 0.0, counts))


def norm_ratio(grad: tf.Tensor, weight: tf.Tensor) -> tf.Tensor:
    """Per variable, gradient norm / weight norm; NaN where the weight norm
    is not above 0 (the ratio says nothing there) or the gradient is missing.
    """
    column = STATISTICS.index("norm")
    g, w = grad[:, column], weight[:, column]
    return tf.where(w > 0, g / tf.where(w > 0, w, 1.0), _NAN)


def histogram_matrices(
    parts: Sequence[Mapping[int, tf.Tensor]], rows: int, buckets: int
) -> list[tuple[tf.Tensor, tf.Tensor]]:
    """For each of `parts` (the gradients, the weights): `(counts [rows,
    buckets], ranges [rows, 3])` of `part[i]` in row `i`, the last range
    column 1 where row i has a tensor, else 0; all bucket counts computed in
    one batched program."""
    orders = [sorted(part) for part in parts]
    tensors = [part[i] for part, order in zip(parts, orders) for i in order]
    counts, ranges = batched_bucket_counts(tensors, buckets)
    matrices, start = [], 0
    for order in orders:
        end = start + len(order)
        part = _placed_histograms(counts[start:end], ranges[start:end], order, rows)
        matrices.append(part)
        start = end
    return matrices


def _placed_histograms(
    counts: tf.Tensor, ranges: tf.Tensor, order: list[int], rows: int
) -> tuple[tf.Tensor, tf.Tensor]:
    buckets = int(counts.shape[1])
    ranges = tf.concat([ranges, tf.ones([len(order), 1])], 1)
    if len(order) == rows:
        return counts, ranges
    counts = tf.concat([counts, tf.zeros([1, buckets], tf.int32)], 0)
    ranges = tf.concat([ranges, tf.zeros([1, 3])], 0)
    position = {i: k for k, i in enumerate(order)}
    take = [position.get(i, len(order)) for i in range(rows)]
    return tf.gather(counts, take), tf.gather(ranges, take)


def scalar_measurement(
    grads: Mapping[int, tf.Tensor],
    weights: Mapping[int, tf.Tensor] | None,
    count: int,
    names: Sequence[str],
    members: Sequence[Sequence[int]],
    extra: Mapping[str, tf.Tensor | float],
) -> Measurement:
    """The scalar statistics of one step: per variable, per group, global.

    Args:
        grads: `{row: gradient}` of the variables that have one.
        weights: `{row: weight}` of every variable, or None for no weight
            statistics.
        count: The number of variables.
        names: The per-variable statistics to compute.
        members: The rows of each group.
        extra: The `Totals` that come from elsewhere: the clip numbers,
            `skipped_steps` and `loss_scale`.
    """
    parts = [grads] if weights is None else [grads, weights]
    grad, *weight_part = statistics_matrices(parts, count, names)
    grad_total, grad_groups = combined_norms(grad, members)
    weight = ratio = None
    weight_total, weight_groups = tf.constant(0.0), tf.zeros_like(grad_groups)
    if weights is not None:
        [weight] = weight_part
        weight_total, weight_groups = combined_norms(weight, members)
        ratio = norm_ratio(grad, weight)
    totals = Totals(
        grad_norm=grad_total,
        weight_norm=weight_total,
        grad_nonfinite=nonfinite_total(grad),
        grad_missing=tf.constant(float(count - len(grads))),
        **{k: tf.cast(v, tf.float32) for k, v in extra.items()},
    )
    groups = tf.stack([grad_groups, weight_groups], axis=1)
    return Measurement(totals, groups, grad, weight, ratio)


def histogram_measurement(
    grads: Mapping[int, tf.Tensor],
    weights: Mapping[int, tf.Tensor] | None,
    count: int,
    buckets: int,
) -> HistogramMeasurement:
    """The histogram bucket counts of one step (weights' too, if given)."""
    parts = [grads] if weights is None else [grads, weights]
    (counts, ranges), *weight_part = histogram_matrices(parts, count, buckets)
    if weights is None:
        return HistogramMeasurement(counts, ranges)
    [(weight_counts, weight_ranges)] = weight_part
    return HistogramMeasurement(counts, ranges, weight_counts, weight_ranges[:, :2])
