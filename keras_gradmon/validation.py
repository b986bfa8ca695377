"""How every constructor checks its arguments, in one house style.

Each check raises a `ValueError` that names the argument in backticks and
ends with "Received: name=value", e.g. "`warning` must be a positive finite
number. Received: warning=-1". `with_overrides` makes an options object from
an instance and keyword arguments, so that a monitor takes one options
object and still accepts its options one by one
(`ActivationMonitor(model, x, every_n_steps=10)`). Pure Python: the alert
rules, the clipping rules and the report import it without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar


def fail(
    name: str, requirement: str, value: object, shown: str | None = None
) -> ValueError:
    """The house error for an argument: "`name` must be ... Received:
    name=value" (`shown`: how the message's first mention names it, e.g.
    an item of a mapping).

    Example:

    >>> fail("window", "must be an integer >= 2", 1)
    ValueError('`window` must be an integer >= 2. Received: window=1')
    """
    return ValueError(f"`{shown or name}` {requirement}. Received: {name}={value!r}")


def _fail(name: str, requirement: str, value: object) -> ValueError:
    return fail(name, f"must be {requirement}", value)


def _is_real(value: object) -> bool:
    # bool is an int subclass, but `warning=True` is a bug, not a threshold.
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


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


def one_of(name: str, value: object, choices: Sequence[str]) -> str:
    """Returns `value` if it is one of the strings in `choices`."""
    if not (isinstance(value, str) and value in choices):
        raise _fail(name, f"one of {sorted(choices)}", value)
    return value


def greater_than_one(name: str, value: object) -> float:
    """Returns `value` as a float if it is a finite number above 1."""
    if not (_is_real(value) and math.isfinite(value) and value > 1):
        raise _fail(name, "a finite number greater than 1", value)
    return float(value)


def open_unit_interval(name: str, value: object) -> float:
    """Returns `value` as a float if it lies strictly between 0 and 1."""
    if not (_is_real(value) and 0 < value < 1):
        raise _fail(name, "a number strictly between 0 and 1", value)
    return float(value)


def positive_int(name: str, value: object) -> int:
    """Returns `value` as an int if it is an integer >= 1."""
    if not (_is_int(value) and value >= 1):
        raise _fail(name, "a positive integer", value)
    return int(value)


def non_negative_int(name: str, value: object) -> int:
    """Returns `value` as an int if it is an integer >= 0."""
    if not (_is_int(value) and value >= 0):
        raise _fail(name, "a non-negative integer", value)
    return int(value)


def non_empty_string(name: str, value: object) -> str:
    """Returns `value` if it is a non-empty string."""
    if not (isinstance(value, str) and value):
        raise _fail(name, "a non-empty string", value)
    return value


def string(name: str, value: object) -> str:
    """Returns `value` if it is a string (possibly empty)."""
    if not isinstance(value, str):
        raise _fail(name, "a string", value)
    return value


def subjects_pattern(value: object) -> re.Pattern[str] | None:
    """Compiles the `subjects` filter; None means every subject."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _fail("subjects", "a regular expression string or None", value)
    try:
        return re.compile(value)
    except re.error as err:
        raise _fail("subjects", f"a valid regular expression ({err})", value) from err


def switch_option(name: str, value: object, keys: Sequence[str]) -> dict | None:
    """An option that is off (False or None), on with its defaults (True) or
    on with some of `keys` set (a mapping): None, `{}` or the mapping as a
    dict; anything else, or an unknown key, refused naming the option.

    Example:

    >>> switch_option("skip_spikes", {"window": 8}, ["window", "z_threshold"])
    {'window': 8}
    >>> switch_option("skip_spikes", True, ["window"])
    {}
    """
    from collections.abc import Mapping

    if value is None or value is False:
        return None
    if value is True:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(
            f"`{name}` must be True, False, None or a mapping of {list(keys)}. "
            f"Received: {name}={value!r}"
        )
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise ValueError(
            f"Unknown `{name}` option(s) {unknown}. Valid options: {list(keys)}. "
            f"Received: {name}={dict(value)!r}"
        )
    return dict(value)


T = TypeVar("T")


class UnknownOptionError(TypeError, ValueError):
    """A keyword argument that is no option of the monitor (a `TypeError`,
    as Python raises for an unknown keyword, and a `ValueError`, as every
    other bad argument of keras_gradmon is)."""


def with_overrides(
    cls: type[T], options: T | None, overrides: Mapping[str, Any], owner: str
) -> T:
    """`options` (or `cls()`) with the fields named in `overrides` replaced;
    every field is validated again by `cls`.

    Args:
        cls: An options dataclass.
        options: An instance of `cls`, or None.
        overrides: `{field: value}`.
        owner: How errors name the constructor.

    Raises:
        UnknownOptionError: A key of `overrides` is no field of `cls`.
        ValueError: `options` is not a `cls`, or a value is invalid.

    Example:

    >>> @dataclasses.dataclass(frozen=True)
    ... class Options:
    ...     every_n_steps: int = 100
    >>> with_overrides(Options, None, {"every_n_steps": 5}, "Monitor")
    Options(every_n_steps=5)
    >>> with_overrides(Options, None, {"every_n_step": 5}, "Monitor")
    Traceback (most recent call last):
    ...
    keras_gradmon.validation.UnknownOptionError: Monitor got an unknown \
argument every_n_step=5; its options are: every_n_steps.
    """
    # The class's own fields first, then those it inherits (the alert options).
    names = [field.name for field in dataclasses.fields(cls)]
    own = [n for n in getattr(cls, "__annotations__", {}) if n in names]
    names = own + [n for n in names if n not in own]
    for name, value in overrides.items():
        if name not in names:
            raise UnknownOptionError(
                f"{owner} got an unknown argument {name}={value!r}; its "
                f"options are: {', '.join(names)}."
            )
    if options is None:
        return cls(**overrides)
    if not isinstance(options, cls):
        raise ValueError(
            f"`options` must be a {cls.__name__} or None. Received: options={options!r}"
        )
    return dataclasses.replace(options, **overrides) if overrides else options


