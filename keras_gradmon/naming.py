"""Names of what is monitored: variable and layer paths, unique names,
group members, and the tag scope of an activation tag's subject."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
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


#: A Keras uid counter at the end of a name (`dense_3`, `sequential_1`).
_UID_SUFFIX = re.compile(r"(?<=[A-Za-z0-9])_\d+$")
_NOT_A_SCOPE = re.compile(r"[^A-Za-z0-9_.\-]+")
#: The most roots the fallback scope names before "-and-N-more".
_MOST_ROOTS = 3


def derived_scope(paths: Sequence[str]) -> str:
    """The tag scope of an unnamed monitored optimizer, from what it trains.

    The rule (docs/tags.md): take each variable path without its last
    segment (the variable's own name: `kernel`, `bias`), unless it has only
    one. The scope is the segments all of them start with, joined by `.`;
    when they share none, their distinct first segments joined by `-`, in
    the order of the variables (more than three: the first and
    `-and-<N>-more`). Keras uid counters are dropped from the segments
    (`sequential_1` becomes `sequential`), and
    characters a scope cannot hold become `_`. It depends on names only, so
    it is the same from run to run, and when a model is built again.

    Example:

    >>> derived_scope(["ActorNetwork/input_mlp/dense0/kernel",
    ...                "ActorNetwork/action/bias"])
    'ActorNetwork'
    >>> derived_scope(["CriticNetwork/value/kernel", "CriticNetwork2/value/kernel"])
    'CriticNetwork-CriticNetwork2'
    >>> derived_scope(["initial_log_alpha"])
    'initial_log_alpha'
    """
    dirs = []
    for path in paths:
        segments = path.split("/")
        dirs.append(segments[:-1] if len(segments) > 1 else segments)
    if not dirs:
        return "optimizer"
    common = _common_prefix(dirs)
    if common:
        scope = ".".join(_UID_SUFFIX.sub("", segment) for segment in common)
    else:
        roots = [_UID_SUFFIX.sub("", segments[0]) for segments in dirs]
        roots = list(dict.fromkeys(roots))
        if len(roots) > _MOST_ROOTS:
            scope = f"{roots[0]}-and-{len(roots) - 1}-more"
        else:
            scope = "-".join(roots)
    return _NOT_A_SCOPE.sub("_", scope).strip("_") or "optimizer"


def _common_prefix(lists: Sequence[list[str]]) -> list[str]:
    """The items every list in `lists` starts with."""
    common = lists[0]
    for items in lists[1:]:
        size = 0
        while size < min(len(common), len(items)) and common[size] == items[size]:
            size += 1
        common = common[:size]
    return common


def describe_paths(paths: Sequence[str]) -> str:
    """A short account of what `paths` are, for messages.

    Example:

    >>> describe_paths(["actor/dense/kernel", "actor/dense/bias"])
    '2 variables: actor/dense/kernel, actor/dense/bias'
    """
    shown = ", ".join(paths[:_MOST_ROOTS])
    more = (
        f", ... ({len(paths) - _MOST_ROOTS} more)" if len(paths) > _MOST_ROOTS else ""
    )
    noun = "variable" if len(paths) == 1 else "variables"
    return f"{len(paths)} {noun}: {shown}{more}"


def layer_prefix(paths: Sequence[str], name: str) -> str | None:
    """The path of layer `name` from its variables' `paths`: the segments
    they all share before their last, up to the last one that is `name`
    (a recurrent layer's variables sit under its cell's name), else all of
    them (a name scope that differs from the layer's name). None without
    paths: the layer has no variables.

    Example:

    >>> layer_prefix(["sequential/dense/kernel", "sequential/dense/bias"], "dense")
    'sequential/dense'
    >>> layer_prefix(["sequential/lstm/lstm_cell/kernel"], "lstm")
    'sequential/lstm'
    """
    if not paths:
        return None
    common = _common_prefix([path.split("/")[:-1] for path in paths])
    for end in range(len(common), 0, -1):
        if common[end - 1] == name:
            return "/".join(common[:end])
    return "/".join(common) or None


def split_scope(subject: str, scopes: Collection[str | None]) -> tuple[str | None, str]:
    """`(scope, layer)` of an activation tag's subject (what follows
    `activation_<stat>/`): scoped when its first segment is one of `scopes`
    (the run's known tag scopes) and a layer follows, else unscoped. A
    layer is named by its path (`sequential/dense`), so a `/` alone does
    not mark a scope; logs of older versions named it by its bare name.

    Example:

    >>> split_scope("actor/sequential/dense", {None, "actor"})
    ('actor', 'sequential/dense')
    >>> split_scope("sequential/dense", {None, "actor"})
    (None, 'sequential/dense')
    """
    head, _, rest = subject.partition("/")
    if rest and head in scopes:
        return head, rest
    return None, subject
