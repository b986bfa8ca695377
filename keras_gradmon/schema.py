"""What a monitor records, without TensorFlow: the statistic names, the
step-wide totals, the columns of the per-variable matrices and the `Layout`
of the flat vector every scalar of a summary lives in. Config, tags, the
state and the report read it; nothing here imports a framework.

Example:

>>> Layout(num_variables=2, num_groups=1, weights=False).size
38
"""

from __future__ import annotations

import dataclasses

import numpy as np

#: The statistics computed for every tensor, in storage order. Each is one
#: module, `keras_gradmon/stats/statistics/<name>.py`: the reductions it
#: needs, how they finish into its value, its careful path and its NumPy
#: reference (`keras_gradmon.stats.registry` loads it by this name). Named
#: here, without a framework, for the config, the tags, the state's columns
#: and the report.
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

#: Columns of the per-variable matrices: the statistics, then whether the
#: variable had a gradient at that step (1.0) or not (0.0).
COLUMNS: tuple[str, ...] = (*STATISTICS, "present")

#: The step-wide scalars of a summary, in storage order.
TOTALS: tuple[str, ...] = (
    "grad_norm",  # L2 norm of all (finite) gradient elements
    "weight_norm",  # L2 norm of all weights
    "grad_nonfinite",  # number of NaN/Inf gradient elements
    "grad_missing",  # number of variables whose gradient was None
    "clip_pre_norm",  # global norm before clipping (NaN/Inf included)
    "clip_post_norm",  # global norm after clipping
    "clip_scale",  # post / pre norm (1 when the pre norm is 0)
    "clip_fraction",  # fraction of steps clipped since the previous summary
    "skipped_steps",  # steps skipped so far (skip_nonfinite or a loss scaler)
    "loss_scale",  # a wrapped loss scaler's scale (else NaN)
    "spike_max_norm",  # largest global norm since the previous summary
    "spike_min_norm",  # smallest global norm since the previous summary
    "spike_max_step",  # the step of the largest
    "spike_skipped",  # steps skipped as spikes so far (skip_spikes)
    "noise_batch_ratio",  # B_simple / the batch of the update
    "noise_b_simple",  # B_simple in examples (with the batch size given)
    "noise_grad_sq",  # EMA of the unbiased |G|^2 estimate
    "noise_trace",  # EMA of the unbiased tr(Sigma) estimate
)


@dataclasses.dataclass(frozen=True)
class Layout:
    """The shapes of the monitor's state, and where each scalar field sits in
    the flat vector of all scalars.

    Example:

    >>> layout = Layout(num_variables=2, num_groups=1, weights=False)
    >>> layout.offset("grad"), layout.size
    (20, 38)
    """

    num_variables: int
    num_groups: int
    weights: bool
    buckets: int | None = None
    history: int = 1
    #: Whether the update/weight ratios are recorded (the `update` field).
    updates: bool = False

    def scalar_fields(self) -> list[tuple[str, tuple[int, ...]]]:
        """`(field, shape)` of each scalar field, in flat-vector order."""
        width = len(COLUMNS)
        fields = [
            ("totals", (len(TOTALS),)),
            ("groups", (self.num_groups, 2)),
            ("grad", (self.num_variables, width)),
        ]
        if self.weights:
            fields += [
                ("weight", (self.num_variables, width)),
                ("ratio", (self.num_variables,)),
            ]
        if self.updates:
            # The update/weight ratios: each variable's, each group's, the
            # global one.
            size = self.num_variables + self.num_groups + 1
            fields.append(("update", (size,)))
        return fields

    def offset(self, field: str) -> int:
        """Where `field` starts in the flat vector."""
        start = 0
        for name, shape in self.scalar_fields():
            if name == field:
                return start
            start += int(np.prod(shape))
        raise KeyError(f"No scalar field {field!r} in this layout.")

    @property
    def size(self) -> int:
        """The length of the flat vector."""
        return sum(int(np.prod(shape)) for _, shape in self.scalar_fields())
