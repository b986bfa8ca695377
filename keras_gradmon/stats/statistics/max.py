"""max: the largest finite element (NaN without any)."""

import numpy as np

from keras_gradmon.stats.statistic import Statistic

STATISTIC = Statistic(
    name="max",
    needs={"extremes"},
    fast=lambda r: r.high,
    careful=lambda c: c.high,
    reference=lambda values, finite: np.max(finite) if finite.size else np.nan,
    empty=float("nan"),
)
