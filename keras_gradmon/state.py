"""The monitor's variables: created once, assigned by field name inside the
train step, read back on the host as plain NumPy numbers.

Every scalar a summary writes lives in one of a few packed fields (`totals`,
`groups`, `grad`, `weight`, `ratio`); `Layout` gives each field its offset in
one flat vector, which is what the tag table (`keras_gradmon.tags`) indexes
and what one compiled read brings back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from keras_gradmon.history import NO_STEP, Ring
from keras_gradmon.measurement import HistogramMeasurement, Measurement
from keras_gradmon.schema import COLUMNS, TOTALS, Layout

#: A function that creates one state variable:
#: `make_variable(name, shape, dtype, initial_value)`.
VariableFactory = Callable[[str, tuple, str, float], Any]

__all__ = [
    "COLUMNS",
    "NO_STEP",
    "HistogramSnapshot",
    "Layout",
    "MonitorState",
    "Snapshot",
]


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The scalar statistics of one summary step, as NumPy data.

    Attributes:
        step: The optimizer step the statistics describe (-1: none yet).
        paths: The variable paths, in row order.
        groups: The group names, in row order.
        values: Every scalar, flat, in `Layout` order (the tag table's index).
        layout: Where each field sits in `values`.
    """

    step: int
    paths: tuple[str, ...]
    groups: tuple[str, ...]
    values: np.ndarray
    layout: Layout

    def field(self, name: str) -> np.ndarray | None:
        """One field of `values` in its shape, or None if not recorded."""
        shapes = dict(self.layout.scalar_fields())
        if name not in shapes:
            return None
        start, shape = self.layout.offset(name), shapes[name]
        return self.values[start : start + int(np.prod(shape))].reshape(shape)

    @property
    def grad(self) -> np.ndarray:
        """`[num_variables, len(COLUMNS)]` gradient statistics (NaN rows for
        variables without a gradient)."""
        return self.field("grad")

    @property
    def weight(self) -> np.ndarray | None:
        """The same for the weights, or None if not recorded."""
        return self.field("weight")

    @property
    def group_grad_norm(self) -> np.ndarray:
        return self.field("groups")[:, 0]

    @property
    def group_weight_norm(self) -> np.ndarray:
        return self.field("groups")[:, 1]

    @property
    def totals(self) -> dict[str, float]:
        """`{name: value}` for each name in `TOTALS`."""
        return dict(zip(TOTALS, self.field("totals").tolist()))

    @property
    def has_grad(self) -> np.ndarray:
        """Boolean `[num_variables]`: whether each variable had a gradient."""
        return self.grad[:, COLUMNS.index("present")] > 0

    def grad_stat(self, name: str) -> dict[str, float]:
        """`{variable path: value}` of one gradient statistic."""
        column = self.grad[:, COLUMNS.index(name)]
        return {
            p: float(v) for p, v, ok in zip(self.paths, column, self.has_grad) if ok
        }


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
    """The variables that hold the recent statistics.

    Every scalar of a summary lives in one flat float32 row in `Layout`
    order; the last `layout.history` rows are kept in a `Ring`
    (`scalars`), so that several summaries recorded between two host
    reads all reach the recorders. Histograms are kept the same way
    (`histograms`: bucket counts, then ranges; the gradients' rows, then
    the weights'). A summary step writes one row of a few variables.

    Args:
        make_variable: Creates one variable (see `VariableFactory`); each
            adapter passes its own, so the state is checkpointed with the
            optimizer.
        layout: The shapes.
        clip_spec: The clipping rule's `state_spec()`, or None.
    """

    def __init__(
        self, make_variable: VariableFactory, layout: Layout, clip_spec: dict | None
    ) -> None:
        self.layout = layout
        row = [("values", (layout.size,), "float32")]
        self.scalars = Ring(make_variable, "stats", layout.history, row)
        # Every step: the skipped steps so far, and [steps, clipped steps]
        # since the last summary.
        self.skipped = make_variable("skipped_steps", (), "int64", 0)
        self.clip_counts = make_variable("clip_counts", (2,), "int64", 0)
        self.clip = {
            name: make_variable(f"clip_{name}", shape, dtype, initial)
            for name, (shape, dtype, initial) in (clip_spec or {}).items()
        }
        self.histograms: Ring | None = None
        if layout.buckets is not None:
            rows = layout.num_variables * (2 if layout.weights else 1)
            payloads = [
                ("counts", (rows, layout.buckets), "int32"),
                ("ranges", (rows, 3), "float32"),
            ]
            self.histograms = Ring(make_variable, "hist", layout.history, payloads)

    # Inside the step -------------------------------------------------------

    def record(self, step: tf.Tensor, measurement: Measurement) -> None:
        """Pushes a summary step's numbers: each field (by name) at its
        place in the flat row."""
        parts = []
        for name, _ in self.layout.scalar_fields():
            value = getattr(measurement, name)
            value = value.stack() if name == "totals" else value
            parts.append(tf.reshape(tf.cast(value, tf.float32), [-1]))
        self.scalars.push(step, [tf.concat(parts, 0)])

    def record_histograms(self, step: tf.Tensor, hist: HistogramMeasurement) -> None:
        """Pushes a histogram step's bucket counts and ranges (gradient rows,
        then weight rows)."""
        counts, ranges = [hist.grad_counts], [hist.grad_range]
        if self.layout.weights:
            counts.append(hist.weight_counts)
            present = tf.ones([self.layout.num_variables, 1])
            ranges.append(tf.concat([hist.weight_range, present], 1))
        self.histograms.push(step, [tf.concat(counts, 0), tf.concat(ranges, 0)])

    def latest_values(self) -> tf.Tensor:
        """The flat row of the latest summary, as a graph tensor."""
        return self.scalars.latest()[0]

    def latest_histograms(self) -> tuple[tf.Tensor, tf.Tensor]:
        """`(counts, ranges)` of the latest histograms, as graph tensors."""
        counts, ranges = self.histograms.latest()
        return counts, ranges

    # Host side -------------------------------------------------------------

    def counts(self) -> tuple[int, int]:
        """How many summaries and histogram steps were recorded so far (one
        or two host reads)."""
        hist = 0 if self.histograms is None else self.histograms.read_count()
        return self.scalars.read_count(), hist

    def capture_scalars(self) -> tuple[tf.Tensor, ...]:
        """The scalar ring as tensors (`Ring.capture`), without waiting."""
        return self.scalars.capture()

    def capture_histograms(self) -> tuple[tf.Tensor, ...] | None:
        """The histogram ring as tensors, or None when histograms are off."""
        return None if self.histograms is None else self.histograms.capture()
