"""nonfinite: the number of NaN and Inf elements, counted, not propagated."""

from keras import ops

from keras_gradmon.stats.statistic import Statistic

STATISTIC = Statistic(
    name="nonfinite",
    needs=(),
    fast=lambda r: ops.cast(r.nonfinite, r.dtype),
    reference=lambda values, finite: values.size - finite.size,
)
