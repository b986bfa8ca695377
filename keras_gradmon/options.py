"""`with_overrides`: an options object from an instance and keyword
arguments, so that a monitor takes one options object and still accepts its
options one by one (`ActivationMonitor(model, x, every_n_steps=10)`).

Pure Python.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

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
    keras_gradmon.options.UnknownOptionError: Monitor got an unknown \
argument every_n_step=5; its options are: every_n_steps.
    """
    names = [field.name for field in dataclasses.fields(cls)]
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
