"""The statistic variables: created once, assigned inside the train step,
read back on the host as plain NumPy numbers.

The layout is packed (one matrix per kind of statistic) so that a summary step
writes a handful of variables and a recorder reads them back in a handful of
host copies, whatever the number of model variables.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_gradmon.stats.moments import STATISTICS

#: Columns of the per-variable matrices: the statistics, then whether the
#: variable had a gradient at that step (1.0) or not (0.0).
COLUMNS: tuple[str, ...] = (*STATISTICS, "present")

#: Scalars that describe the whole step.
GLOBAL_FIELDS: tuple[str, ...] = (
    "grad_norm",  # L2 norm of all gradient elements (finite ones)
    "weight_norm",  # L2 norm of all weights
    "grad_nonfinite",  # number of NaN/Inf gradient elements
    "grad_missing",  # number of variables whose gradient was None
    "clip_pre_norm",  # global norm before clipping (NaN/Inf included)
    "clip_post_norm",  # global norm after clipping
    "clip_fraction",  # fraction of steps clipped since the previous summary
    "skipped_steps",  # non-finite steps skipped so far (skip_nonfinite or
    # by a wrapped LossScaleOptimizer)
    "loss_scale",  # the loss scale of a wrapped LossScaleOptimizer (else NaN)
)

#: A function that creates one state variable:
#: `make_variable(name, shape, dtype, initial_value)`.
VariableFactory = Callable[[str, tuple, str, float], Any]

NO_STEP = -1


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The scalar statistics of one summary step, as NumPy data.

    Attributes:
        step: The optimizer step the statistics describe (-1: none yet).
        paths: The variable paths, in row order.
        groups: The group names, in row order.
        grad: `[num_variables, len(COLUMNS)]` gradient statistics; rows of
            variables without a gradient are NaN.
        weight: The same for the weights, or None if not recorded.
        group_grad_norm: `[num_groups]` gradient L2 norm of each group.
        group_weight_norm: `[num_groups]` weight L2 norm of each group.
        totals: `{name: value}` for each name in `GLOBAL_FIELDS`.
    """

    step: int
    paths: tuple[str, ...]
    groups: tuple[str, ...]
    grad: np.ndarray
    weight: np.ndarray | None
    group_grad_norm: np.ndarray
    group_weight_norm: np.ndarray
    totals: dict[str, float]

    def grad_stat(self, name: str) -> dict[str, float]:
        """`{variable path: value}` of one gradient statistic."""
        column = self.grad[:, COLUMNS.index(name)]
        return {
            p: float(v) for p, v, ok in zip(self.paths, column, self.has_grad) if ok
        }

    @property
    def has_grad(self) -> np.ndarray:
        """Boolean `[num_variables]`: whether each variable had a gradient."""
        return self.grad[:, COLUMNS.index("present")] > 0


@dataclasses.dataclass(frozen=True)
class HistogramSnapshot:
    """Histogram bucket counts of one histogram step, as NumPy data.

    Attributes:
        step: The optimizer step the histograms describe (-1: none yet).
        paths: The variable paths, in row order.
        grad_counts: int `[num_variables, buckets]` gradient bucket counts.
        grad_range: `[num_variables, 2]` min and max of each gradient.
        weight_counts, weight_range: the same for the weights, or None.
        has_grad: Boolean `[num_variables]`.
    """

    step: int
    paths: tuple[str, ...]
    grad_counts: np.ndarray
    grad_range: np.ndarray
    weight_counts: np.ndarray | None
    weight_range: np.ndarray | None
    has_grad: np.ndarray


class MonitorState:
    """The variables that hold the most recent statistics.

    Args:
        make_variable: Creates one variable (see `VariableFactory`); the
            Keras 3 wrapper passes its `add_variable`, the tf_keras one makes
            `tf.Variable`s, so both are checkpointed with the optimizer.
        num_variables: Number of monitored model variables.
        num_groups: Number of groups.
        buckets: Histogram buckets, or None for no histograms.
        weights: Whether weight statistics are kept.
        clip_spec: The clipping rule's `state_spec()`, or None without
            clipping.
    """

    def __init__(
        self,
        make_variable: VariableFactory,
        num_variables: int,
        num_groups: int,
        buckets: int | None,
        weights: bool,
        clip_spec: dict | None = None,
    ) -> None:
        self._readers: dict[str, Any] = {}
        width = len(COLUMNS)
        self.stats_step = make_variable("stats_step", (), "int64", NO_STEP)
        self.grad = make_variable("grad_stats", (num_variables, width), "float32", 0)
        self.weight = (
            make_variable("weight_stats", (num_variables, width), "float32", 0)
            if weights
            else None
        )
        self.groups = make_variable("group_norms", (num_groups, 2), "float32", 0)
        self.totals = make_variable("totals", (len(GLOBAL_FIELDS),), "float32", 0)
        # Every step: [steps, clipped steps] since the last summary, and the
        # cumulative count of skipped (non-finite) steps.
        self.clip_counts = make_variable("clip_counts", (2,), "int64", 0)
        self.skipped = make_variable("skipped_steps", (), "int64", 0)
        self.clip = {
            name: make_variable(f"clip_{name}", shape, dtype, initial)
            for name, (shape, dtype, initial) in (clip_spec or {}).items()
        }
        self.hist_step = None
        if buckets is not None:
            self.hist_step = make_variable("hist_step", (), "int64", NO_STEP)
            shape = (num_variables, buckets)
            self.grad_counts = make_variable("grad_hist", shape, "int32", 0)
            # [min, max, present] per variable.
            self.grad_range = make_variable(
                "grad_hist_range", (num_variables, 3), "float32", 0
            )
            self.weight_counts = (
                make_variable("weight_hist", shape, "int32", 0) if weights else None
            )
            self.weight_range = (
                make_variable("weight_hist_range", (num_variables, 2), "float32", 0)
                if weights
                else None
            )

    # Host side -------------------------------------------------------------

    def steps(self) -> tuple[int, int]:
        """`(stats_step, hist_step)` of the latest records (-1: none)."""
        hist = int(self.hist_step.numpy()) if self.hist_step is not None else NO_STEP
        return int(self.stats_step.numpy()), hist

    def snapshot(self, paths: Sequence[str], groups: Sequence[str]) -> Snapshot:
        """Reads the latest scalar statistics (one consistent step)."""
        names = ["stats_step", "grad", "weight", "groups", "totals"]
        values = self._read_together("scalars", names)
        group_norms = values["groups"]
        return Snapshot(
            step=int(values["stats_step"]),
            paths=tuple(paths),
            groups=tuple(groups),
            grad=values["grad"],
            weight=values.get("weight"),
            group_grad_norm=group_norms[:, 0],
            group_weight_norm=group_norms[:, 1],
            totals={k: float(v) for k, v in zip(GLOBAL_FIELDS, values["totals"])},
        )

    def histogram_snapshot(self, paths: Sequence[str]) -> HistogramSnapshot | None:
        """Reads the latest histograms, or None when histograms are off."""
        if self.hist_step is None:
            return None
        names = [
            "hist_step",
            "grad_counts",
            "grad_range",
            "weight_counts",
            "weight_range",
        ]
        values = self._read_together("histograms", names)
        grad_range = values["grad_range"]
        return HistogramSnapshot(
            step=int(values["hist_step"]),
            paths=tuple(paths),
            grad_counts=values["grad_counts"],
            grad_range=grad_range[:, :2],
            weight_counts=values.get("weight_counts"),
            weight_range=values.get("weight_range"),
            has_grad=grad_range[:, 2] > 0,
        )

    def _read_together(self, kind: str, names: list[str]) -> dict[str, np.ndarray]:
        # One compiled read of all the variables (one host round trip), and
        # again if a newer step landed meanwhile: Keras may run callbacks on
        # a worker thread while the next step runs.
        present = [n for n in names if getattr(self, n, None) is not None]
        if kind not in self._readers:
            variables = [getattr(self, n) for n in present]
            self._readers[kind] = tf.function(
                lambda: [tf.identity(v) for v in variables], autograph=False
            )
        step_variable = getattr(self, present[0])
        for _ in range(5):
            values = [np.asarray(v) for v in self._readers[kind]()]
            if int(step_variable.numpy()) == int(values[0]):
                break
        return dict(zip(present, values))
