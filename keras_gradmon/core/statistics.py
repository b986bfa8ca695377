"""The per-tensor statistics: each one object (`Statistic`: its name, the
reductions it needs from the shared batched pass, how it finishes into its
value, its careful path and its NumPy float64 reference, in the style of
Cockpit's quantities), the eight the monitor records, and the registry that
`keras_gradmon.core.batched` computes any set of them from.

The names the monitor records are `keras_gradmon.columns.STATISTICS`, in
storage order, without a framework (config, tags and the report read
them); their definitions are here, one constant each. A new statistic is
one definition here, in `BUILT_IN`, and its name in `STATISTICS` (which
places its column in the monitor's state); one registered at run time
(`register`) is computed by `batched_statistics` but not recorded.

Example:

>>> [s.name for s in lookup(["norm", "max_abs"])]
['norm', 'max_abs']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from keras import ops

from keras_gradmon.columns import STATISTICS

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
            `keras_gradmon.core.batched.Reductions`), in `keras.ops`.
        reference: Its NumPy float64 value from `(values, finite)`: all the
            elements and the finite ones, flat (none finite included: the
            tests' oracle, independent of `empty`).
        empty: Its value for a tensor without finite element (0.0 or NaN);
            None: `fast` is right then too (counts).
        careful: Its values from the careful recomputation (a
            `keras_gradmon.core.batched.Careful`: the elements scaled by
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


# The statistics the monitor records -------------------------------------

def _norm_untrusted(r):
    """Squares lost below the smallest normal, though an element is not 0."""
    nonzero = r.count > ops.cast(r.zeros, r.dtype)
    return (r.sum_of_squares < r.tiny) & nonzero


NORM = Statistic(
    name="norm",
    needs={"sq"},
    fast=lambda r: ops.sqrt(r.sum_of_squares),
    untrusted=_norm_untrusted,
    careful=lambda c: c.scale * c.sq**0.5,
    reference=lambda values, finite: np.sqrt(np.sum(finite**2)),
    empty=0.0,
)


MEAN = Statistic(
    name="mean",
    needs={"sum"},
    fast=lambda r: r.mean,
    careful=lambda c: c.scale * (c.sum / c.n),
    reference=lambda values, finite: np.mean(finite) if finite.size else np.nan,
    empty=float("nan"),
)


# A squared mean (less the shift) above _CANCELLATION variances cancels.
_CANCELLATION = 1e2


def _std_untrusted(r):
    """Squares of the deviations lost below the smallest normal, or a mean
    far from the shift against the spread (cancellation)."""
    spread = ops.maximum(r.high - r.shift, r.shift - r.low)
    lost = (r.sq < r.tiny) & (spread > 0)
    return lost | (ops.square(r.mean_shifted) > _CANCELLATION * r.var)


STD = Statistic(
    name="std",
    needs={"sum", "sq", "shift", "extremes"},
    fast=lambda r: ops.sqrt(r.var),
    untrusted=_std_untrusted,
    careful=lambda c: c.scale * c.var**0.5,
    reference=lambda values, finite: np.std(finite) if finite.size else np.nan,
    empty=float("nan"),
)


MIN = Statistic(
    name="min",
    needs={"extremes"},
    fast=lambda r: r.low,
    careful=lambda c: c.low,
    reference=lambda values, finite: np.min(finite) if finite.size else np.nan,
    empty=float("nan"),
)


MAX = Statistic(
    name="max",
    needs={"extremes"},
    fast=lambda r: r.high,
    careful=lambda c: c.high,
    reference=lambda values, finite: np.max(finite) if finite.size else np.nan,
    empty=float("nan"),
)


MAX_ABS = Statistic(
    name="max_abs",
    needs={"extremes"},
    fast=lambda r: ops.maximum(ops.abs(r.low), ops.abs(r.high)),
    careful=lambda c: ops.maximum(ops.abs(c.low), ops.abs(c.high)),
    reference=lambda values, finite: np.max(np.abs(finite), initial=0.0),
    empty=0.0,
)


def _zero_fraction(r):
    sizes = ops.cast(ops.maximum(r.sizes, 1), r.dtype)
    return ops.cast(r.zeros, r.dtype) / sizes


ZERO_FRACTION = Statistic(
    name="zero_fraction",
    needs=(),
    fast=_zero_fraction,
    reference=lambda values, finite: np.mean(values == 0) if values.size else 0.0,
)


NONFINITE = Statistic(
    name="nonfinite",
    needs=(),
    fast=lambda r: ops.cast(r.nonfinite, r.dtype),
    reference=lambda values, finite: values.size - finite.size,
)


# The registry ------------------------------------------------------------

#: The statistics the monitor records, by name: each of `STATISTICS`.
BUILT_IN: dict[str, Statistic] = {
    s.name: s for s in (NORM, MEAN, STD, MIN, MAX, MAX_ABS, ZERO_FRACTION, NONFINITE)
}
if tuple(BUILT_IN) != STATISTICS:  # pragma: no cover - a new one half added
    raise ImportError(
        f"keras_gradmon.columns.STATISTICS {STATISTICS} and the statistics "
        f"defined here {tuple(BUILT_IN)} must be the same, in the same order."
    )

_REGISTRY: dict[str, Statistic] = dict(BUILT_IN)


def register(statistic: Statistic) -> Statistic:
    """Adds `statistic` (computable by `batched_statistics` once registered,
    in a column after those of `STATISTICS`) and returns it.

    Raises:
        ValueError: if another statistic of that name is registered.

    Example:

    >>> size = register(Statistic("size", needs=(), fast=lambda r: r.sizes,
    ...     reference=lambda values, finite: values.size))
    >>> "size" in registered()
    True
    >>> unregister("size")
    """
    known = _REGISTRY.get(statistic.name)
    if known is not None and known is not statistic:
        raise ValueError(
            f"A statistic named {statistic.name!r} is already registered. "
            f"Registered: {list(_REGISTRY)}"
        )
    _REGISTRY[statistic.name] = statistic
    return statistic


def unregister(name: str) -> None:
    """Removes the statistic `name` registered at run time.

    Raises:
        ValueError: for a statistic of `STATISTICS` (the monitor's state
            has its column) or one not registered.

    Example:

    >>> unregister("norm")
    Traceback (most recent call last):
    ...
    ValueError: 'norm' is in STATISTICS: it cannot be unregistered.
    """
    if name in STATISTICS:
        raise ValueError(f"{name!r} is in STATISTICS: it cannot be unregistered.")
    lookup([name])
    del _REGISTRY[name]


def registered() -> tuple[str, ...]:
    """The names of all registered statistics, those of `STATISTICS` first.

    Example:

    >>> registered()[:2]
    ('norm', 'mean')
    """
    return tuple(_REGISTRY)


def lookup(names: Sequence[str]) -> tuple[Statistic, ...]:
    """The registered statistics `names`, in that order.

    Raises:
        ValueError: for a name not registered.

    Example:

    >>> lookup(["std"])[0].needs == {"sum", "sq", "shift", "extremes"}
    True
    """
    unknown = [n for n in names if n not in _REGISTRY]
    if unknown:
        raise ValueError(
            f"Unknown statistic {unknown[0]!r}. Valid names: {list(_REGISTRY)}. "
            f"Received: names={list(names)!r}"
        )
    return tuple(_REGISTRY[n] for n in names)


def columns(names: Sequence[str]) -> tuple[str, ...]:
    """The columns of `batched_statistics(tensors, names)`: `STATISTICS`,
    then the other registered statistics of `names`, in their order.

    Example:

    >>> columns(["max", "norm"]) == STATISTICS
    True
    """
    lookup(names)
    extra = [n for n in dict.fromkeys(names) if n not in STATISTICS]
    return (*STATISTICS, *extra)
