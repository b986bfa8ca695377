"""The registered statistics, by name: those of
`keras_gradmon.schema.STATISTICS`, each loaded from its module
`keras_gradmon.stats.statistics.<name>` (its `STATISTIC`), then any
registered at run time with `register`.

The schema names the statistics the monitor records, in storage order,
without importing a framework (config, tags and the report read it); the
modules say how each is computed. `batched_statistics` computes any
registered ones: those of `STATISTICS` in their columns, the others in
columns after them.

Example:

>>> [s.name for s in lookup(["norm", "max_abs"])]
['norm', 'max_abs']
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from keras_gradmon.schema import STATISTICS
from keras_gradmon.stats.statistic import Statistic

__all__ = ["columns", "lookup", "register", "registered", "unregister"]


def _load(name: str) -> Statistic:
    module = importlib.import_module(f"keras_gradmon.stats.statistics.{name}")
    statistic = module.STATISTIC
    if statistic.name != name:
        raise ValueError(
            f"{module.__name__} defines the statistic {statistic.name!r}, not {name!r}."
        )
    return statistic


_REGISTRY: dict[str, Statistic] = {name: _load(name) for name in STATISTICS}


def register(statistic: Statistic) -> Statistic:
    """Adds `statistic` (computable by `batched_statistics` once registered,
    in a column after those of `STATISTICS`) and returns it.

    Raises:
        ValueError: if another statistic of that name is registered.

    Example:

    >>> size = register(Statistic("size", needs=(), fast=lambda r: r.sizes,
    ...     reference=lambda values, finite: values.size))
    >>> "size" in registered()
    True
    >>> unregister("size")
    """
    known = _REGISTRY.get(statistic.name)
    if known is not None and known is not statistic:
        raise ValueError(
            f"A statistic named {statistic.name!r} is already registered. "
            f"Registered: {list(_REGISTRY)}"
        )
    _REGISTRY[statistic.name] = statistic
    return statistic


def unregister(name: str) -> None:
    """Removes the statistic `name` registered at run time.

    Raises:
        ValueError: for a statistic of `STATISTICS` (the monitor's state
            has its column) or one not registered.

    Example:

    >>> unregister("norm")
    Traceback (most recent call last):
    ...
    ValueError: 'norm' is in STATISTICS: it cannot be unregistered.
    """
    if name in STATISTICS:
        raise ValueError(f"{name!r} is in STATISTICS: it cannot be unregistered.")
    lookup([name])
    del _REGISTRY[name]


def registered() -> tuple[str, ...]:
    """The names of all registered statistics, those of `STATISTICS` first.

    Example:

    >>> registered()[:2]
    ('norm', 'mean')
    """
    return tuple(_REGISTRY)


def lookup(names: Sequence[str]) -> tuple[Statistic, ...]:
    """The registered statistics `names`, in that order.

    Raises:
        ValueError: for a name not registered.

    Example:

    >>> lookup(["std"])[0].needs == {"sum", "sq", "shift", "extremes"}
    True
    """
    unknown = [n for n in names if n not in _REGISTRY]
    if unknown:
        raise ValueError(
            f"Unknown statistic {unknown[0]!r}. Valid names: {list(_REGISTRY)}. "
            f"Received: names={list(names)!r}"
        )
    return tuple(_REGISTRY[n] for n in names)


def columns(names: Sequence[str]) -> tuple[str, ...]:
    """The columns of `batched_statistics(tensors, names)`: `STATISTICS`,
    then the other registered statistics of `names`, in their order.

    Example:

    >>> columns(["max", "norm"]) == STATISTICS
    True
    """
    lookup(names)
    extra = [n for n in dict.fromkeys(names) if n not in STATISTICS]
    return (*STATISTICS, *extra)
