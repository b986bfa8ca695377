"""The shared pass of `batched.py`, which every statistic finishes from.

On the NaN-padded `[blocks, block]` matrix of the tensors of one layout
(`layout.py`), reduced by rows, then by tensor with segment ids:
`Reductions` takes, in one pass in float32 (float64 if any tensor is), the
counts and the reductions the statistics asked need (`statistic.REDUCTIONS`),
sums around a shift (a median of three elements) against cancellation;
`Careful` recomputes, scaled by the largest magnitude and the variance in
two passes, what a float32 pass cannot be trusted with. Reductions read a
`where`: XLA:CPU then runs fast library ones. Derived values are computed on
first use, so a statistic's `fast` or `careful` only costs what it reads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from keras import backend as keras_backend
from keras import ops

from keras_gradmon import backend
from keras_gradmon.backend import Tensor
from keras_gradmon.stats.layout import Layout

# A block sums 1 per zero, _NONFINITE per non-finite element: exact in float32.
_NONFINITE = 4096.0
# Sums of squares below _TINY smallest normal numbers may have lost terms.
_TINY = 1e8


def _segment_min(data: Tensor, segments: Any, num_segments: int) -> Tensor:
    return -ops.segment_max(-data, segments, num_segments=num_segments)


def per_tensor(partials: Tensor, layout: Layout, op=ops.segment_sum) -> Tensor:
    """The per-block `partials` reduced by tensor with `op`."""
    return op(partials, layout.segments, num_segments=layout.count + 1)[:-1]


def per_block(values: Tensor, layout: Layout) -> Tensor:
    """The per-tensor `values` as a `[blocks, 1]` column (0 for the spare)."""
    return ops.take(ops.pad(values, [[0, 1]]), layout.segments, 0)[:, None]


def extremes(x: Tensor, finite: Tensor, layout: Layout, k=None) -> tuple:
    """Min and max by tensor, non-finite elements replaced by k (or +-inf)."""
    inf = float("inf")
    low = ops.min(ops.where(finite, x, inf if k is None else k), axis=1)
    high = ops.max(ops.where(finite, x, -inf if k is None else k), axis=1)
    low = per_tensor(low, layout, _segment_min)
    return low, per_tensor(high, layout, ops.segment_max)


def _shift(x: Tensor, layout: Layout) -> tuple[Tensor, Tensor]:
    """Median of the finite ones of 3 elements by tensor, and if there was one."""
    samples = ops.take(ops.reshape(x, [-1]), layout.samples)
    finite = ops.isfinite(samples)
    ordered = ops.sort(ops.where(finite, samples, float("inf")), axis=1)
    found = ops.sum(ops.cast(finite, "int32"), axis=1)
    middle = ops.maximum(found - 1, 0) // 2
    middle = ops.take_along_axis(ordered, middle[:, None], axis=1)[:, 0]
    return ops.where(found > 0, middle, ops.zeros_like(middle)), found > 0


def _counts(x: Tensor, finite: Tensor, layout: Layout) -> tuple:
    """Finite (in x's dtype), non-finite and zero elements by tensor."""
    zero = ops.where(x == 0, 1.0, 0.0)
    code = ops.sum(ops.where(finite, zero, _NONFINITE), axis=1)
    nonfinite = ops.floor(code / _NONFINITE)
    ints = ops.stack([nonfinite, code - _NONFINITE * nonfinite], 1)
    totals = per_tensor(ops.cast(ints, "int32"), layout)
    nonfinite = totals[:, 0] - layout.pads
    return ops.cast(layout.sizes - nonfinite, x.dtype), nonfinite, totals[:, 1]


def _sums(terms: Mapping[str, Tensor], finite: Tensor, layout: Layout) -> dict:
    """Each of `terms` summed over the finite elements by tensor, together."""
    names = list(terms)
    if not names:
        return {}
    sums = [ops.sum(ops.where(finite, terms[n], 0.0), axis=1) for n in names]
    sums = per_tensor(ops.stack(sums, 1), layout)
    return {n: sums[:, i] for i, n in enumerate(names)}


class Reductions:
    """The one-pass reductions of the tensors of one layout, one value per
    tensor: what a statistic's `fast` reads.

    Attributes:
        count, n: Finite elements (in the compute dtype), and at least 1.
        zeros, nonfinite: Zero and non-finite elements (int32).
        sizes: All elements. dtype: The compute dtype.
        shift, found: The shift ("shift" or "extremes"), and whether it is an
            element (else 0).
        low, high: Min and max ("extremes").
        sum, sq: Sums of the finite elements and of their squares ("sum",
            "sq"), less the shift if "shift" is needed.
        terms: `{name: sum}` of the statistics' own element-wise terms.
    """

    def __init__(
        self,
        x: Tensor,
        layout: Layout,
        needs: set[str],
        terms: Mapping[str, Callable[[Tensor], Tensor]],
    ) -> None:
        finite = ops.isfinite(x)
        self.sizes, self.dtype = layout.sizes, x.dtype
        self.count, self.nonfinite, self.zeros = _counts(x, finite, layout)
        self.n = ops.maximum(self.count, 1.0)
        self.shifted, self.has_extremes, d = "shift" in needs, False, x
        if needs & {"shift", "extremes"}:
            self.shift, self.found = _shift(x, layout)
            k = per_block(self.shift, layout)
            d = x - k if self.shifted else x
            # In place of non-finite elements, one of the tensor's own: neutral.
            self.low, self.high = extremes(x, finite, layout, k)
            self.has_extremes = True
        named = {n: d if n == "sum" else d * d for n in ("sum", "sq") if n in needs}
        named.update({f"term:{n}": f(x) for n, f in terms.items()})
        sums = _sums(named, finite, layout)
        self.sum, self.sq = sums.get("sum"), sums.get("sq")
        self.terms = {n: sums[f"term:{n}"] for n in terms}

    @property
    def tiny(self) -> float:
        """Below this, a sum of squares may have lost terms (underflow)."""
        return _TINY * np.finfo(keras_backend.standardize_dtype(self.dtype)).tiny

    @property
    def doubtful(self) -> Tensor:
        """Where the pass itself cannot be trusted: extremes taken with
        non-finite elements replaced by a shift no element gave."""
        if self.has_extremes:
            return ~self.found
        return ops.zeros_like(self.count, dtype="bool")

    @functools.cached_property
    def mean_shifted(self) -> Tensor:
        """The mean less the shift."""
        return self.sum / self.n

    @functools.cached_property
    def mean(self) -> Tensor:
        """The mean of the finite elements."""
        if self.shifted:
            return self.mean_shifted + self.shift
        return self.mean_shifted

    @functools.cached_property
    def var(self) -> Tensor:
        """Their variance, from the sums around the shift ("shift")."""
        return ops.maximum(self.sq / self.n - ops.square(self.mean_shifted), 0.0)

    @functools.cached_property
    def sum_of_squares(self) -> Tensor:
        """The sum of their squares (of x, not less the shift)."""
        if not self.shifted:
            return self.sq
        return self.count * self.var + self.count * ops.square(self.mean)


class Careful:
    """The careful recomputation of the tensors of one layout, what a
    statistic's `careful` reads: each computed on first use.

    Attributes:
        count, n: As in `Reductions`.
        low, high: Min and max of the finite elements (+inf, -inf if none).
        scale: The largest magnitude (1 if 0 or none).
        sum, sq: Sums of the finite elements / scale and of their squares.
        var: The variance of the elements / scale, in two passes.
    """

    def __init__(self, x: Tensor, layout: Layout, count: Tensor) -> None:
        self._x, self._layout, self._finite = x, layout, ops.isfinite(x)
        self.count, self.n = count, ops.maximum(count, 1.0)

    @functools.cached_property
    def _extremes(self) -> tuple[Tensor, Tensor]:
        return extremes(self._x, self._finite, self._layout)

    @property
    def low(self) -> Tensor:
        return self._extremes[0]

    @property
    def high(self) -> Tensor:
        return self._extremes[1]

    @functools.cached_property
    def scale(self) -> Tensor:
        largest = ops.maximum(ops.abs(self.low), ops.abs(self.high))
        has = (self.count > 0) & (largest > 0)
        return ops.where(has, largest, ops.ones_like(largest))

    @functools.cached_property
    def _scaled(self) -> tuple[Tensor, Tensor]:
        """The finite elements / scale (0 for the others), and their sums."""
        x, layout = ops.where(self._finite, self._x, 0.0), self._layout
        y = backend.divide(x, per_block(self.scale, layout))
        sums = ops.stack([ops.sum(y, axis=1), ops.sum(ops.square(y), axis=1)], 1)
        return y, per_tensor(sums, layout)

    @property
    def sum(self) -> Tensor:
        return self._scaled[1][:, 0]

    @property
    def sq(self) -> Tensor:
        return self._scaled[1][:, 1]

    @functools.cached_property
    def var(self) -> Tensor:
        y, layout = self._scaled[0], self._layout
        deviation = y - per_block(self.sum / self.n, layout)
        deviation = ops.where(self._finite, deviation, 0.0)
        return per_tensor(ops.sum(ops.square(deviation), axis=1), layout) / self.n
