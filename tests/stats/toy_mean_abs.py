"""A test-only statistic that brings its own reduction: the mean magnitude of
the finite elements, from the sum of |x| the shared pass takes for it (its
`term`). No careful path: right while that sum fits the compute dtype."""

import numpy as np
from keras import ops

from keras_gradmon.core.statistics import Statistic

STATISTIC = Statistic(
    name="mean_abs",
    needs=(),
    term=ops.abs,
    fast=lambda r: r.terms["mean_abs"] / r.n,
    reference=lambda values, finite: np.mean(np.abs(finite)) if finite.size else np.nan,
    empty=float("nan"),
)


def fits(values: np.ndarray) -> bool:
    """Whether the sum of magnitudes of `values` fits float32, where this
    statistic is right."""
    return np.sum(np.abs(values[np.isfinite(values)]), dtype="f8") < 3e38
