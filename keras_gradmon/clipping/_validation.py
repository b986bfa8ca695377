"""Constructor argument checks for clipping rules, in the house message style.

Every message names the argument in backticks and ends with
"Received: name=value", e.g.
"`max_norm` must be a positive finite number. Received: max_norm=0".
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence


def _fail(name: str, requirement: str, value: object) -> ValueError:
    return ValueError(f"`{name}` must be {requirement}. Received: {name}={value!r}")


def _is_real(value: object) -> bool:
    # bool is an int subclass, but `max_norm=True` is a bug, not a threshold.
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def positive_finite(name: str, value: object) -> float:
    """Returns `value` as a float if it is a positive finite number."""
    if not (_is_real(value) and math.isfinite(value) and value > 0):
        raise _fail(name, "a positive finite number", value)
    return float(value)


def in_closed_range(name: str, value: object, low: float, high: float) -> float:
    """Returns `value` as a float if `low <= value <= high`."""
    if not (_is_real(value) and low <= value <= high):
        raise _fail(name, f"a number between {low:g} and {high:g}", value)
    return float(value)


def open_unit_interval(name: str, value: object) -> float:
    """Returns `value` as a float if it lies strictly between 0 and 1."""
    if not (_is_real(value) and 0 < value < 1):
        raise _fail(name, "a number strictly between 0 and 1", value)
    return float(value)


def positive_int(name: str, value: object) -> int:
    """Returns `value` as an int if it is an integer >= 1."""
    if not (
        isinstance(value, numbers.Integral)
        and not isinstance(value, bool)
        and value >= 1
    ):
        raise _fail(name, "a positive integer", value)
    return int(value)


def one_of(name: str, value: object, choices: Sequence[str]) -> str:
    """Returns `value` if it is one of the strings in `choices`."""
    if not (isinstance(value, str) and value in choices):
        raise _fail(name, f"one of {sorted(choices)}", value)
    return value
