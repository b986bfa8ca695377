"""zero_fraction: the fraction of all elements that are 0 (0 for an empty
tensor), from exact counts."""

import numpy as np
from keras import ops

from keras_gradmon.stats.statistic import Statistic


def _fast(r):
    sizes = ops.cast(ops.maximum(r.sizes, 1), r.dtype)
    return ops.cast(r.zeros, r.dtype) / sizes


STATISTIC = Statistic(
    name="zero_fraction",
    needs=(),
    fast=_fast,
    reference=lambda values, finite: np.mean(values == 0) if values.size else 0.0,
)
