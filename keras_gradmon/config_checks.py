"""Checks of single `MonitorConfig` options, each with an error that names
the option and the value received."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

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
            "must be None or a non-empty string of letters, digits, '_', '.' or '-'",
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


def check_clipping(clipping: Any) -> dict | None:
    """The `clipping` option with `"enabled"` filled in; an invalid rule or
    parameter refused with the option in the message.

    Example:

    >>> check_clipping({"method": "global_norm", "max_norm": 1.0})["enabled"]
    True
    """
    if clipping is None:
        return None
    if not isinstance(clipping, Mapping) or "method" not in clipping:
        _fail("clipping", 'must be None or a mapping with a "method" key', clipping)
    options = dict(clipping)
    enabled = options.pop("enabled", True)
    if not isinstance(enabled, bool):
        _fail("clipping['enabled']", "must be a bool", enabled)
    from keras_gradmon.clipping import make_clip_rule

    try:
        make_clip_rule(**options)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"Invalid `clipping`: {error} (in clipping={dict(clipping)!r})"
        ) from None
    return {**options, "enabled": enabled}


def check_skip_spikes(value: Any) -> Any:
    """The `skip_spikes` option (a mapping copied to a dict), refused with
    the option named when invalid.

    Example:

    >>> check_skip_spikes({"window": 32, "min_history": 16})
    {'window': 32, 'min_history': 16}
    """
    if value is False:
        return value  # (without importing Keras: the report reads configs)
    from keras_gradmon.signals.skip_spikes import SpikeSkipper

    SpikeSkipper.from_option(value)
    return dict(value) if isinstance(value, Mapping) else value


def check_noise_scale(value: Any) -> Any:
    """The `noise_scale` option (a mapping copied to a dict), refused with
    the option named when invalid.

    Example:

    >>> check_noise_scale({"batch_size": 32})
    {'batch_size': 32}
    """
    if value is False:
        return value  # (without importing Keras: the report reads configs)
    from keras_gradmon.signals.noise_scale import from_option

    from_option(value)
    return dict(value) if isinstance(value, Mapping) else value
