"""The update/weight ratio (the effective learning rate):
||w_after - w_before|| / ||w_before||, per variable, per group and over
all variables, from the update the inner optimizer really applied
(weight decay, momentum and its own clipping included).

Karpathy's rule of thumb puts a healthy ratio around 1e-3 per step: far
below, the layer barely learns; far above, it is unstable.

Example:

>>> import numpy as np
>>> old = {0: np.array([3.0, 4.0], "f4"), 1: np.array([1.0], "f4")}
>>> new = {0: np.array([3.0, 4.05], "f4"), 1: np.array([1.0], "f4")}
>>> [round(float(x), 4) for x in update_ratios(old, new, 2, [[0]])]
[0.01, 0.0, 0.01, 0.0098]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from keras import ops

from keras_gradmon.stats import combine_norms

_NAN = float("nan")


def update_ratios(
    old: Mapping[int, Any],
    new: Mapping[int, Any],
    rows: int,
    members: Sequence[Sequence[int]],
) -> Any:
    """`[rows + len(members) + 1]` float32: each variable's ratio (by row;
    NaN for a row not in `old`, or whose weights had a norm of 0), each
    group's (over its rows in `old`), then the global one.

    Args:
        old: The weights before the update, by row.
        new: The weights after it, by row (the same rows).
        rows: The number of variables.
        members: The rows of each group.
    """
    order = sorted(old)
    # Plain float32 norms: a small program (weights and updates do not come
    # near float32's limit, and a non-finite one reads NaN, left out).
    moved = ops.stack([_norm(_wide(new[i]) - _wide(old[i])) for i in order])
    size = ops.stack([_norm(_wide(old[i])) for i in order])
    position = {i: k for k, i in enumerate(order)}
    per_row = [_ratio(moved[position[i]], size[position[i]]) for i in order]
    placed = [per_row[position[i]] if i in position else _NAN for i in range(rows)]
    combined = [
        _combined_ratio(moved, size, [position[i] for i in group if i in position])
        for group in members
    ]
    combined.append(_combined_ratio(moved, size, list(range(len(order)))))
    return ops.stack([ops.cast(x, "float32") for x in placed + combined])


def _wide(value: Any) -> Any:
    """`value` in float32 at least, so that the difference is exact enough."""
    value = ops.convert_to_tensor(value)
    return value if value.dtype == "float64" else ops.cast(value, "float32")


def _norm(value: Any) -> Any:
    return ops.sqrt(ops.sum(ops.square(value)))


def _ratio(moved: Any, size: Any) -> Any:
    return ops.where(size > 0, moved / ops.where(size > 0, size, 1.0), _NAN)


def _combined_ratio(moved: Any, size: Any, positions: list[int]) -> Any:
    if not positions:
        return ops.convert_to_tensor(_NAN)
    pick = lambda x: combine_norms(ops.take(x, positions, axis=0))  # noqa: E731
    return _ratio(pick(moved), pick(size))
