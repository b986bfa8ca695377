"""Per-tensor statistics: norm, moments, extremes, sparsity, finiteness.

The one-tensor case of `keras_gradmon.stats.batched.batched_statistics`
(each statistic is defined in its module of `keras_gradmon.stats.statistics`):
statistics of the *finite* elements, NaN and Inf counted in `nonfinite`
instead of turning every other number into NaN, computed in float32 (float64
for float64 input) and returned as float32, right near the float32 limit
(1e30) and for tiny values (1e-30).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from keras_gradmon.backend import Tensor
from keras_gradmon.schema import STATISTICS
from keras_gradmon.stats import registry
from keras_gradmon.stats.batched import batched_statistics


def tensor_statistics(
    x: Any, names: Sequence[str] = STATISTICS
) -> dict[str, Tensor]:
    """Statistics of all elements of `x`, as float32 scalar tensors.

    Args:
        x: A tensor of floating dtype (float16, bfloat16, float32,
            float64), its shape static or known only at run time.
            `tf.IndexedSlices` are densified first (duplicates summed).
        names: Which statistics to compute: registered names
            (`keras_gradmon.stats.registry`), usually of `STATISTICS`.

    Returns:
        `{name: value}` for each of `names`. `mean`, `std`, `min` and `max`
        are NaN when `x` has no finite element; `norm` and `max_abs` are
        then 0.

    Example:

    >>> import numpy as np
    >>> s = tensor_statistics(np.array([3.0, -4.0, 0.0, np.nan], "f4"))
    >>> float(s["norm"]), float(s["nonfinite"]), float(s["zero_fraction"])
    (5.0, 1.0, 0.25)
    """
    row, columns = stack_statistics(x, names), registry.columns(names)
    return {name: row[columns.index(name)] for name in names}


def stack_statistics(
    x: Any, names: Sequence[str] = STATISTICS
) -> Tensor:
    """The statistics of `x` as a float32 vector in `STATISTICS` order (then
    the other registered statistics of `names`, as `registry.columns`);
    statistics not in `names` are not computed and read NaN.

    Example:

    >>> import numpy as np
    >>> tuple(stack_statistics(np.ones([4], "f4")).shape)
    (8,)
    """
    return batched_statistics([x], names)[0]


__all__ = ["STATISTICS", "stack_statistics", "tensor_statistics"]
