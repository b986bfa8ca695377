"""Which monitor writes which tag scope where: two monitors that would write
the same tags to one destination are refused, instead of merging silently
into one run (their points would interleave, and alerts would fire on the
mix)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable
from typing import Any

_lock = threading.Lock()
# {(destination key, scope): (weak reference to the owner, its label, weak
# reference to the destination object, or None for a path)}
_owners: dict[tuple[Hashable, str | None], tuple[weakref.ref, str, Any]] = {}


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
    writer = None if isinstance(destination, str) else weakref.ref(destination)
    key = (destination if writer is None else id(destination), scope)
    with _lock:
        reference, other_label, other_writer = _owners.get(key, (None, "", None))
        other = reference() if reference is not None else None
        if other_writer is not None and other_writer() is not destination:
            other = None  # that writer is gone; a new one got its id
        if other is not None and other is not owner:
            where = "this writer" if writer is not None else destination
            shown = "unscoped tags" if scope is None else f"tag scope {scope!r}"
            raise ValueError(
                f"Two monitored optimizers would write {shown} to {where}: "
                f"{other_label!r} and {label!r}. "
                "Their points would merge into one series. Give each wrapper "
                "its own `name=` (used as its tag scope) or `tag_scope=`, or "
                "write to separate log directories."
            )
        _owners[key] = (weakref.ref(owner), label, writer)


def claim_monitor(monitor: Any, destinations: list, label: str) -> None:
    """Claims `monitor`'s tag scope at each of `destinations` (see `claim`)."""
    for destination in destinations:
        claim(destination, monitor.config.tag_scope, monitor, label)
