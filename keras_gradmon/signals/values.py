"""The initial values of a signal's state, for tests and examples."""

from __future__ import annotations

from typing import Any

from keras import ops


def initial_values(spec: dict[str, tuple[tuple, str, float]]) -> dict[str, Any]:
    """The initial state values of a signal's `state_spec()`, as tensors
    (what its variables start from).

    Example:

    >>> tuple(initial_values({"n": ((2,), "int64", 0)})["n"].shape)
    (2,)
    """
    return {
        name: ops.full(shape, initial, dtype)
        for name, (shape, dtype, initial) in spec.items()
    }
