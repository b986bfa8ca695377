"""max_abs: the largest magnitude of the finite elements (0 without any)."""

import numpy as np
from keras import ops

from keras_gradmon.stats.statistic import Statistic

STATISTIC = Statistic(
    name="max_abs",
    needs={"extremes"},
    fast=lambda r: ops.maximum(ops.abs(r.low), ops.abs(r.high)),
    careful=lambda c: ops.maximum(ops.abs(c.low), ops.abs(c.high)),
    reference=lambda values, finite: np.max(np.abs(finite), initial=0.0),
    empty=0.0,
)
