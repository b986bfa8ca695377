"""min: the smallest finite element (NaN without any)."""

import numpy as np

from keras_gradmon.stats.statistic import Statistic

STATISTIC = Statistic(
    name="min",
    needs={"extremes"},
    fast=lambda r: r.low,
    careful=lambda c: c.low,
    reference=lambda values, finite: np.min(finite) if finite.size else np.nan,
    empty=float("nan"),
)
