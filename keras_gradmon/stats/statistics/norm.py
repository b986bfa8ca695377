"""norm: the L2 norm of the finite elements (0 without any)."""

import numpy as np
from keras import ops

from keras_gradmon.stats.statistic import Statistic


def _untrusted(r):
    """Squares lost below the smallest normal, though an element is not 0."""
    nonzero = r.count > ops.cast(r.zeros, r.dtype)
    return (r.sum_of_squares < r.tiny) & nonzero


STATISTIC = Statistic(
    name="norm",
    needs={"sq"},
    fast=lambda r: ops.sqrt(r.sum_of_squares),
    untrusted=_untrusted,
    careful=lambda c: c.scale * c.sq**0.5,
    reference=lambda values, finite: np.sqrt(np.sum(finite**2)),
    empty=0.0,
)
