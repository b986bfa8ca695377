"""mean: the mean of the finite elements (NaN without any)."""

import numpy as np

from keras_gradmon.stats.statistic import Statistic

STATISTIC = Statistic(
    name="mean",
    needs={"sum"},
    fast=lambda r: r.mean,
    careful=lambda c: c.scale * (c.sum / c.n),
    reference=lambda values, finite: np.mean(finite) if finite.size else np.nan,
    empty=float("nan"),
)
