"""A test-only statistic, written as a module of
`keras_gradmon.core.statistics` is: the root mean square of the finite
elements, from the shared pass's sum of squares, with a careful path (so
values whose squares overflow float32 are right)."""

import numpy as np

from keras_gradmon.core.statistics import NORM, Statistic


def _reference(values: np.ndarray, finite: np.ndarray) -> float:
    return np.sqrt(np.mean(finite**2)) if finite.size else np.nan


STATISTIC = Statistic(
    name="rms",
    needs={"sq"},
    fast=lambda r: (r.sum_of_squares / r.n) ** 0.5,
    untrusted=NORM.untrusted,  # the same lost squares as the norm's
    careful=lambda c: c.scale * (c.sq / c.n) ** 0.5,
    reference=_reference,
    empty=float("nan"),
)
