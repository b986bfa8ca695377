"""Which monitor writes which tag scope where: two monitors never write the
same tags to one destination (their points would interleave into one series,
and alerts would fire on the mix).

An unnamed monitor (no `name=`, no `tag_scope=`) that would write unscoped
tags where another monitor already does gets a tag scope derived from what
it trains (`keras_gradmon.naming.derived_scope`: `ActorNetwork`,
`CriticNetwork-CriticNetwork2`, `initial_log_alpha`). The first monitor at a
destination keeps its unscoped tags: it may have written them already, and a
single optimizer's tags never change. The derived scope is written once to
each destination (a `tag_scope/<scope>` text summary) and announced once on
the console (logger "keras_gradmon"). Two monitors whose derived scopes tie
(the same variables, or variables of the same names) are refused.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from keras_gradmon.columns import GLOBAL, tag
from keras_gradmon.naming import derived_scope, describe_paths

logger = logging.getLogger("keras_gradmon")

#: The statistic of the text summary that announces a derived scope.
SCOPE_TEXT = "tag_scope"

_lock = threading.Lock()
# {(destination key, scope): (weak reference to the owner, its label, weak
# reference to the destination object, or None for a path)}
_owners: dict[tuple[Hashable, str | None], tuple[weakref.ref, str, Any]] = {}


def _key(destination: Any) -> tuple[Hashable, Any]:
    """The registry key of `destination` and a weak reference to it (None
    for a path)."""
    if isinstance(destination, str):
        return destination, None
    return id(destination), weakref.ref(destination)


def _holder(destination: Any, scope: str | None) -> tuple[Any, str]:
    """The live owner of `scope` at `destination` and its label, or None."""
    key, _ = _key(destination)
    reference, label, writer = _owners.get((key, scope), (None, "", None))
    owner = reference() if reference is not None else None
    if writer is not None and writer() is not destination:
        owner = None  # that writer is gone; a new one got its id
    return owner, label


def _refusal(scope: str | None, destination: Any, labels: tuple, why: str = ""):
    where = destination if isinstance(destination, str) else "this writer"
    shown = "unscoped tags" if scope is None else f"tag scope {scope!r}"
    return ValueError(
        f"Two monitored optimizers would write {shown} to {where}: "
        f"{labels[0]!r} and {labels[1]!r}.{why} "
        "Their points would merge into one series. Give each wrapper "
        "its own `name=` (used as its tag scope) or `tag_scope=`, or "
        "write to separate log directories."
    )


def _take(destinations: list, scope: str | None, owner: Any, label: str) -> list:
    """Claims `scope` at every destination (all or none); returns those not
    claimed by `owner` before. Call with `_lock` held."""
    for destination in destinations:
        other, other_label = _holder(destination, scope)
        if other is not None and other is not owner:
            configured = getattr(getattr(owner, "config", None), "tag_scope", scope)
            why = ""
            if scope is not None and configured is None:
                why = f" ({label!r} got {scope!r} from what it trains.)"
            raise _refusal(scope, destination, (other_label, label), why)
    fresh = []
    for destination in destinations:
        if _holder(destination, scope)[0] is not owner:
            fresh.append(destination)
        key, writer = _key(destination)
        _owners[(key, scope)] = (weakref.ref(owner), label, writer)
    return fresh


def claim(destination: Any, scope: str | None, owner: Any, label: str) -> None:
    """Records that `owner` writes tags of `scope` to `destination`.

    A live other owner of the same pair is an error; an owner (or a writer
    object) that was garbage-collected releases its claims.

    Args:
        destination: A log directory (its real path) or a writer object.
        scope: The tag scope (None: unscoped tags).
        owner: The monitor that writes.
        label: How the error names `owner` (its optimizer's name).

    Raises:
        ValueError: Another live monitor writes the same scope there.

    Example:

    >>> claim("/tmp/logs", "actor", monitor, "actor")  # doctest: +SKIP
    """
    with _lock:
        _take([destination], scope, owner, label)


def _holds_unscoped(monitor: Any) -> bool:
    """Whether `monitor` already writes unscoped tags somewhere."""
    for (_, scope), (reference, _, writer) in list(_owners.items()):
        alive = writer is None or writer() is not None
        if scope is None and alive and reference() is monitor:
            return True
    return False


def _scope_for(monitor: Any, destinations: list, label: str) -> tuple:
    """`(scope, label of the unscoped monitor it was derived beside, or
    None)`: the monitor's scope, or a newly derived one where it would
    collide unscoped. Call with `_lock` held."""
    current = monitor.tags.scope
    if current is not None or monitor.config.tag_scope is not None:
        return current, None
    for destination in destinations:
        other, other_label = _holder(destination, None)
        if other is None or other is monitor:
            continue
        scope = derived_scope(monitor.paths)
        paths = getattr(other, "paths", None)
        if _holds_unscoped(monitor):
            why = f" {label!r} already writes unscoped tags elsewhere."
            raise _refusal(None, destination, (other_label, label), why)
        if paths is not None and derived_scope(paths) == scope:
            why = f" Both train variables named {scope!r}: no scope tells them apart."
            raise _refusal(None, destination, (other_label, label), why)
        where = destination if isinstance(destination, str) else "this writer"
        return scope, f"{other_label!r} already writes unscoped tags to {where}"
    return None, None


def claim_monitor(
    monitor: Any,
    destinations: list,
    label: str,
    announce: Callable[[Any, str, str], None] | None = None,
) -> str | None:
    """Claims a built `monitor`'s tag scope at each of `destinations`; an
    unnamed monitor that would collide with another unscoped one gets a
    scope derived from what it trains (`monitor.use_scope`), written to the
    destinations and announced on the console, once.

    Args:
        monitor: A built `GradientMonitor`.
        destinations: Recorders (the announcement goes through their
            `write_text`; those without a `destination` are skipped), or
            destinations themselves (`tf.summary` writers).
        label: How messages name the monitor (its optimizer's name).
        announce: `announce(destination, tag, text)` writes the derived
            scope's announcement to a destination that is no recorder.

    Returns:
        The monitor's tag scope (`monitor.tags.scope`).

    Raises:
        ValueError: Another live monitor writes the same scope there.

    Example:

    >>> claim_monitor(optimizer.monitor, [writer], "critic")  # doctest: +SKIP
    'CriticNetwork-CriticNetwork2'
    """
    targets = {}
    for item in destinations:
        destination = getattr(item, "destination", item)
        if destination is not None:
            targets.setdefault(_key(destination)[0], (destination, item))
    places = [destination for destination, _ in targets.values()]
    with _lock:  # (replicas may trace the same monitor in parallel)
        scope, beside = _scope_for(monitor, places, label)
        fresh = _take(places, scope, monitor, label)
        if beside is not None:
            monitor.use_scope(scope)
    if scope is None or monitor.config.tag_scope is not None:
        return scope
    text = announcement(monitor, label, beside)
    if beside is not None:
        logger.warning(text)
    targets = [t for t in targets.values() if any(t[0] is d for d in fresh)]
    _announce(targets, tag(SCOPE_TEXT, scope), text, announce)
    return scope


def _announce(targets: list, name: str, text: str, announce: Any) -> None:
    """Writes a derived scope's announcement once, at step 0, to each
    `(destination, recorder or destination)` of `targets`."""
    for destination, item in targets:
        if hasattr(item, "write_text"):
            item.write_text(name, [text], 0)
            item.flush()
        elif announce is not None:
            announce(destination, name, text)


def announcement(monitor: Any, label: str, beside: str | None) -> str:
    """The line that says which scope a monitor's tags got, and why."""
    scope = monitor.tags.scope
    why = f", since {beside}" if beside else ""
    return (
        f"keras_gradmon: monitored optimizer {label!r} writes its tags under "
        f"the tag scope {scope!r} ({tag('grad_norm', GLOBAL, scope)}, ...), "
        f"derived from what it trains ({describe_paths(monitor.paths)}){why}. "
        "Pass `name=` (or `tag_scope=`) to the wrapper to choose the scope."
    )
