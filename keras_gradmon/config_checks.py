"""Checks of single `MonitorConfig` options, each with an error that names
the option and the value received."""

from __future__ import annotations

import re

from keras_gradmon.schema import STATISTICS


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _fail(name: str, requirement: str, value: object) -> None:
    raise ValueError(f"`{name}` {requirement}. Received: {name}={value!r}")


def check_tag_scope(value: object) -> None:
    """Refuses a tag scope that is not None nor a plain name.

    Example:

    >>> check_tag_scope("actor")
    """
    if value is not None and (
        not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", value)
    ):
        _fail(
            "tag_scope",
            "must be None or a non-empty string of letters, "
            "digits, '_', '.' or '-'",
            value,
        )


def check_statistics(value: object) -> tuple[str, ...]:
    """The statistic names in `value`, as a tuple; unknown names refused.

    Example:

    >>> check_statistics(["norm", "mean"])
    ('norm', 'mean')
    """
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        _fail("statistics", f"must be a list of names from {list(STATISTICS)}", value)
    unknown = [name for name in value if name not in STATISTICS]
    if unknown:
        raise ValueError(
            f"`statistics` contains unknown statistic {unknown[0]!r}. Valid "
            f"names: {list(STATISTICS)}. Received: statistics={value!r}"
        )
    return tuple(value)
