"""std: the (population) standard deviation of the finite elements (NaN
without any), from sums around a shift; in two passes where those cancel."""

import numpy as np
from keras import ops

from keras_gradmon.stats.statistic import Statistic

# A squared mean (less the shift) above _CANCELLATION variances cancels.
_CANCELLATION = 1e2


def _untrusted(r):
    """Squares of the deviations lost below the smallest normal, or a mean
    far from the shift against the spread (cancellation)."""
    spread = ops.maximum(r.high - r.shift, r.shift - r.low)
    lost = (r.sq < r.tiny) & (spread > 0)
    return lost | (ops.square(r.mean_shifted) > _CANCELLATION * r.var)


STATISTIC = Statistic(
    name="std",
    needs={"sum", "sq", "shift", "extremes"},
    fast=lambda r: ops.sqrt(r.var),
    untrusted=_untrusted,
    careful=lambda c: c.scale * c.var**0.5,
    reference=lambda values, finite: np.std(finite) if finite.size else np.nan,
    empty=float("nan"),
)
