"""A per-tensor statistic as one object: its name, the reductions it needs
from the shared batched pass, how it finishes into its value, its careful
path and its NumPy float64 reference (in the style of Cockpit's quantities).

Those of `keras_gradmon.schema.STATISTICS` live one to a module in
`keras_gradmon.stats.statistics`; `keras_gradmon.stats.registry` holds them
and `keras_gradmon.stats.batched` computes any set of them in one program.
Nothing here imports a framework: `fast`, `careful` and `untrusted` are
written in `keras.ops` by the modules that define them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

#: The reductions of the shared pass a statistic can need, besides the counts
#: of finite, zero and non-finite elements, always taken: "extremes" (min and
#: max), "sum" and "sq" (sums of the finite elements and of their squares),
#: "shift" (those sums taken around one of the tensor's elements, against
#: cancellation).
REDUCTIONS = frozenset({"extremes", "sum", "sq", "shift"})


@dataclasses.dataclass(frozen=True)
class Statistic:
    """One per-tensor statistic of the finite elements of a tensor.

    Attributes:
        name: Its name (a column of `batched_statistics`).
        needs: The reductions of the shared pass it reads (`REDUCTIONS`).
        fast: Its values, one per tensor, from the one-pass reductions (a
            `keras_gradmon.stats.reductions.Reductions`), in `keras.ops`.
        reference: Its NumPy float64 value from `(values, finite)`: all the
            elements and the finite ones, flat (none finite included: the
            tests' oracle, independent of `empty`).
        empty: Its value for a tensor without finite element (0.0 or NaN);
            None: `fast` is right then too (counts).
        careful: Its values from the careful recomputation (a
            `keras_gradmon.stats.reductions.Careful`: the elements scaled by
            their largest magnitude, the variance in two passes), taken for
            the tensors the one pass cannot be trusted with; None: no careful
            path (`fast` is kept).
        untrusted: Where its finite fast value still cannot be trusted
            (squares lost below the smallest normal, cancellation): a bool
            per tensor; a non-finite value never is. Needs `careful`.
        term: An element-wise function of the elements, for a statistic no
            reduction of `REDUCTIONS` serves: the shared pass also sums it
            over each tensor's finite elements, as `reductions.terms[name]`.

    Example:

    >>> count = Statistic(
    ...     "count", needs=(), fast=lambda r: r.count,
    ...     reference=lambda values, finite: finite.size)
    >>> count.reference_value([1.0, float("nan"), 3.0])
    2.0
    """

    name: str
    needs: Iterable[str]
    fast: Callable[[Any], Any]
    reference: Callable[[np.ndarray, np.ndarray], Any]
    empty: float | None = None
    careful: Callable[[Any], Any] | None = None
    untrusted: Callable[[Any], Any] | None = None
    term: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        needs = frozenset(self.needs)
        unknown = sorted(needs - REDUCTIONS)
        if unknown:
            raise ValueError(
                f"Statistic {self.name!r} needs an unknown reduction "
                f"{unknown[0]!r}. Valid reductions: {sorted(REDUCTIONS)}. "
                f"Received: needs={sorted(needs)}"
            )
        if self.untrusted is not None and self.careful is None:
            raise ValueError(
                f"Statistic {self.name!r} has `untrusted` rows but no `careful` "
                "path to recompute them."
            )
        object.__setattr__(self, "needs", needs)

    @property
    def reductions(self) -> frozenset[str]:
        """`needs`, and its own name if it brings a `term` to the pass."""
        return self.needs | {self.name} if self.term else self.needs

    def reference_value(self, values: Any) -> float:
        """Its float64 NumPy value over the elements of `values`."""
        a = np.asarray(values, dtype=np.float64).ravel()
        return float(self.reference(a, a[np.isfinite(a)]))
