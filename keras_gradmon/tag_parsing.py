"""Reading tags back (the report's side of `keras_gradmon.tags`): split a
tag into statistic, scope and subject, find the monitors' scopes among a
run's tags. No TensorFlow import: the report starts without it."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

GLOBAL = "global"


def variable_statistic(statistic: str) -> bool:
    """Whether every subject of `statistic` is a variable path (per-variable
    statistics other than the norm and the non-finite count, which have
    global and group subjects too).

    Example:

    >>> variable_statistic("grad_std"), variable_statistic("grad_norm")
    (True, False)
    """
    if statistic in ("grad_to_weight", "grad_hist", "weight_hist"):
        return True
    kind, _, name = statistic.partition("_")
    return kind in ("grad", "weight") and name not in (
        "",
        "norm",
        "nonfinite",
        "missing",
    )


@dataclasses.dataclass(frozen=True)
class ParsedTag:
    """A tag split into its parts."""

    statistic: str
    scope: str | None
    subject: str


def parse(name: str, scopes: Collection[str] = ()) -> ParsedTag:
    """Splits a tag into statistic, scope (one of `scopes`, or None) and
    subject. Variable paths hold '/' too, so the scopes must be known.

    Example:

    >>> parse("grad_norm/actor/dense/kernel", scopes={"actor"})
    ParsedTag(statistic='grad_norm', scope='actor', subject='dense/kernel')
    >>> parse("grad_norm/dense/kernel").scope is None
    True
    """
    statistic, _, rest = name.partition("/")
    for scope in sorted(scopes, key=len, reverse=True):
        if rest.startswith(f"{scope}/"):
            return ParsedTag(statistic, scope, rest[len(scope) + 1 :])
    return ParsedTag(statistic, None, rest)


def monitor_scopes(names: Iterable[str]) -> set[str | None]:
    """The scopes of the monitored optimizers whose tags are in `names`
    (None: unscoped), found from their `grad_norm/[<scope>/]global` tags."""
    found: set[str | None] = set()
    for name in names:
        statistic, _, rest = name.partition("/")
        if statistic != "grad_norm" or not rest.endswith(GLOBAL):
            continue
        head = rest[: -len(GLOBAL)]
        if head == "":
            found.add(None)
        elif head.endswith("/") and "/" not in head[:-1]:
            found.add(head[:-1])
    return found
