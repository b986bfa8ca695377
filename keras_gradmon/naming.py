"""Names of what is monitored: variable paths, unique names, group members."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any


def variable_path(variable: Any) -> str:
    """The path of a Keras 3 variable, or a tf.Variable's name without `:0`.

    Example:

    >>> variable_path(tf.Variable(0.0, name="w"))  # doctest: +SKIP
    'w'
    """
    path = getattr(variable, "path", None)
    if isinstance(path, str) and path:
        return path
    name = variable.name
    return name[:-2] if name.endswith(":0") else name


def unique_names(names: Sequence[str]) -> list[str]:
    """`names`, made unique with a `_1`, `_2` ... suffix if repeated.

    Example:

    >>> unique_names(["dense", "dense", "head"])
    ['dense', 'dense_1', 'head']
    """
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        if name in seen:
            seen[name] += 1
            name = f"{name}_{seen[name]}"
        else:
            seen[name] = 0
        unique.append(name)
    return unique


def unique_paths(variables: Sequence[Any]) -> list[str]:
    """Variable paths, made unique with a `_1`, `_2` ... suffix if repeated."""
    return unique_names([variable_path(v) for v in variables])


def match_groups(groups: dict[str, str], paths: Sequence[str]) -> dict[str, list[int]]:
    """Indices of the variables in each group; a group matching none is an
    error that lists the paths.

    Example:

    >>> match_groups({"head": "head/"}, ["body/kernel", "head/kernel"])
    {'head': [1]}
    """
    members = {}
    for name, pattern in groups.items():
        regex = re.compile(pattern)
        members[name] = [i for i, path in enumerate(paths) if regex.search(path)]
        if not members[name]:
            raise ValueError(
                f"Group {name!r} of `groups` matches no variable: "
                f"groups[{name!r}]={pattern!r}. Variable paths: {list(paths)}"
            )
    return members


#: Group names that tags use for something else.
RESERVED_GROUP_NAMES = ("global",)


def check_groups(groups: object) -> dict[str, str]:
    """`groups` as a dict, if it maps valid names to valid regexes.

    Example:

    >>> check_groups({"head": "dense_2"})
    {'head': 'dense_2'}
    """
    if not isinstance(groups, Mapping):
        raise ValueError(
            "`groups` must be a mapping from group name to regex. "
            f"Received: groups={groups!r}"
        )
    for name, pattern in groups.items():
        if (
            not isinstance(name, str)
            or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name)
            or name in RESERVED_GROUP_NAMES
        ):
            raise ValueError(
                "Group names in `groups` must be non-empty strings of "
                "letters, digits, '_', '.' or '-', other than 'global'. "
                f"Received: groups={dict(groups)!r} (name {name!r})"
            )
        if not isinstance(pattern, str):
            raise ValueError(
                f"`groups[{name!r}]` must be a regular expression string. "
                f"Received: groups[{name!r}]={pattern!r}"
            )
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(
                f"`groups[{name!r}]` is not a valid regular expression "
                f"({error}). Received: groups[{name!r}]={pattern!r}"
            ) from None
    return dict(groups)
