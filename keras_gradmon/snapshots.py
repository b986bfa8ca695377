"""What the host reads back: one summary's scalars (`Snapshot`) and one
histogram step's bucket counts (`HistogramSnapshot`), as NumPy data.

Example:

>>> from keras_gradmon.schema import Layout
>>> layout = Layout(num_variables=1, num_groups=0, weights=False)
>>> snapshot = Snapshot.of_captured(3, np.zeros(layout.size), ["w"], [], layout)
>>> snapshot.step, snapshot.totals["grad_norm"]
(3, 0.0)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from keras_gradmon.schema import COLUMNS, TOTALS, Layout


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

    @classmethod
    def of_captured(
        cls, step: Any, values: Any, paths: Any, groups: Any, layout: Layout
    ) -> Snapshot:
        """A `Snapshot` of a captured `(step, values)` row."""
        return cls(int(step), tuple(paths), tuple(groups), np.asarray(values), layout)

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

    @classmethod
    def of_captured(
        cls, step: Any, counts: Any, ranges: Any, paths: Any, weights: bool
    ) -> HistogramSnapshot:
        """A `HistogramSnapshot` of a captured `(step, counts, ranges)` row
        (the gradients' rows, then the weights' if `weights`)."""
        counts, ranges, n = np.asarray(counts), np.asarray(ranges), len(paths)
        return cls(
            step=int(step),
            paths=tuple(paths),
            grad_counts=counts[:n],
            grad_range=ranges[:n, :2],
            weight_counts=counts[n:] if weights else None,
            weight_range=ranges[n:, :2] if weights else None,
            has_grad=ranges[:n, 2] > 0,
        )
