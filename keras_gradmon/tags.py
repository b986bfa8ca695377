"""The TensorBoard tag scheme: the one table of what a monitor writes, and the
parser that reads its tags back (for the report).

Tags put the statistic first so that TensorBoard groups cards by statistic:
`grad_norm/global`, `grad_norm/<group>`, `grad_<stat>/<variable path>`,
`weight_<stat>/...`, `grad_to_weight/<path>`, `clip/pre_norm`,
`skipped/steps`, `loss_scale/scale`, `grad_hist/<path>`, `weight_hist/<path>`
(see docs/tags.md). With a tag scope every tag becomes
`<statistic>/<scope>/<subject>`.

`TagTable.build` makes the table once, when the monitor is built: each scalar
tag with its index in the flat vector of `MonitorState` (see
`keras_gradmon.state.Layout`). Host recorders index the vector they read;
the in-graph writer gathers from the same indices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import numpy as np

from keras_gradmon.tag_parsing import (  # noqa: F401  (the parsing side)
    GLOBAL,
    ParsedTag,
    monitor_scopes,
    parse,
    variable_statistic,
)

if TYPE_CHECKING:
    from keras_gradmon.config import MonitorConfig
    from keras_gradmon.monitor import GradientMonitor
    from keras_gradmon.schema import Layout

# (No TensorFlow import at module level: the report parses tags with this
# module and should start without loading TensorFlow.)


#: `(tag statistic, tag subject, TOTALS field)` of the step-wide scalars, and
#: when each is written (a key of `_wanted`).
_TOTAL_TAGS = (
    ("grad_norm", GLOBAL, "grad_norm", "always"),
    ("grad_nonfinite", GLOBAL, "grad_nonfinite", "always"),
    ("grad_missing", GLOBAL, "grad_missing", "always"),
    ("clip", "pre_norm", "clip_pre_norm", "clip"),
    ("clip", "post_norm", "clip_post_norm", "clip"),
    ("clip", "scale", "clip_scale", "clip"),
    ("clip", "fraction", "clip_fraction", "clip"),
    ("skipped", "steps", "skipped_steps", "skip"),
    ("loss_scale", "scale", "loss_scale", "loss_scale"),
    ("weight_norm", GLOBAL, "weight_norm", "weights"),
    ("spikes", "max_norm", "spike_max_norm", "spikes"),
    ("spikes", "min_norm", "spike_min_norm", "spikes"),
    ("spikes", "max_step", "spike_max_step", "spikes"),
    ("skipped", "spikes", "spike_skipped", "skip_spikes"),
    ("noise_scale", "batch_ratio", "noise_batch_ratio", "noise"),
    ("noise_scale", "b_simple", "noise_b_simple", "noise_examples"),
    ("noise_scale", "grad_sq", "noise_grad_sq", "noise"),
    ("noise_scale", "trace", "noise_trace", "noise"),
)


def tag(statistic: str, subject: str, scope: str | None = None) -> str:
    """The tag of `statistic` for `subject` (`global`, a group or a variable).

    Example:

    >>> tag("grad_norm", "global", scope="actor")
    'grad_norm/actor/global'
    """
    return f"{statistic}/{scope}/{subject}" if scope else f"{statistic}/{subject}"


@dataclasses.dataclass(frozen=True)
class ScalarTag:
    """One scalar a summary writes.

    Attributes:
        tag: The tag.
        index: Where its value sits in the monitor's flat scalar vector.
        row: The variable it describes, or -1.
        needs_grad: Written only when variable `row` had a gradient.
        optional: Left out when its value is not finite (the ratio to a
            weight norm of 0).
    """

    tag: str
    index: int
    row: int = -1
    needs_grad: bool = False
    optional: bool = False


@dataclasses.dataclass(frozen=True)
class HistogramTag:
    """One histogram a histogram step writes: `kind` "grad" or "weight"."""

    tag: str
    kind: str
    row: int


def _wanted(when: str, config: MonitorConfig, layout: Layout, loss_scaled: bool):
    skip_spikes = bool(config.skip_spikes)
    noise = config.noise_scale
    return {
        "always": True,
        "clip": config.clip_rule is not None,
        "skip": config.skip_nonfinite or loss_scaled or skip_spikes,
        "loss_scale": loss_scaled,
        "weights": layout.weights,
        "spikes": config.track_spikes,
        "skip_spikes": skip_spikes,
        "noise": bool(noise),
        "noise_examples": isinstance(noise, dict) and bool(noise.get("batch_size")),
    }[when]


class TagTable:
    """Every tag a monitor writes, with where its value comes from.

    Attributes:
        scope: The tag scope every tag is written under (None: unscoped):
            the configured `tag_scope`, or the scope derived when the
            monitor started writing beside another one (see
            `keras_gradmon.recorders.claims`). Read it here, not from the
            config, for the tags this monitor really writes.

    Example:

    >>> table = TagTable.build(config, paths, groups, layout)  # doctest: +SKIP
    >>> table.scalar_values(snapshot.values, snapshot.has_grad)  # doctest: +SKIP
    {'grad_norm/global': 0.81, ...}
    >>> table.scope is None  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        scalars: Sequence[ScalarTag],
        histograms: Sequence[HistogramTag],
        scope: str | None = None,
    ) -> None:
        self.scope = scope
        self.scalars = tuple(scalars)
        self._picked: dict[frozenset, TagTable] = {}
        self.histograms = tuple(histograms)
        self._tags = np.array([s.tag for s in self.scalars], dtype=object)
        self._index = np.array([s.index for s in self.scalars], dtype=np.int64)
        self._row = np.array([s.row for s in self.scalars], dtype=np.int64)
        self._needs_grad = np.array([s.needs_grad for s in self.scalars], bool)
        self._optional = np.array([s.optional for s in self.scalars], bool)

    @classmethod
    def build(
        cls,
        config: MonitorConfig,
        paths: Sequence[str],
        groups: Sequence[str],
        layout: Layout,
        loss_scaled: bool = False,
        scope: str | None = None,
    ) -> TagTable:
        """The table of a monitor with these options, variables and groups,
        under `scope` (None: `config.tag_scope`)."""
        from keras_gradmon.schema import TOTALS

        scope, entries = scope or config.tag_scope, []
        totals = layout.offset("totals")
        for statistic, subject, field, when in _TOTAL_TAGS:
            if _wanted(when, config, layout, loss_scaled):
                index = totals + TOTALS.index(field)
                entries.append(ScalarTag(tag(statistic, subject, scope), index))
        start = layout.offset("groups")
        for i, group in enumerate(groups):
            entries.append(ScalarTag(tag("grad_norm", group, scope), start + 2 * i))
            if layout.weights:
                index = start + 2 * i + 1
                entries.append(ScalarTag(tag("weight_norm", group, scope), index))
        if layout.updates:
            entries += _update_tags(config, paths, groups, layout, scope)
        if config.per_variable:
            entries += _variable_tags(config, paths, layout, scope)
        histograms = []
        if layout.buckets is not None:
            for row, path in enumerate(paths):
                histograms.append(
                    HistogramTag(tag("grad_hist", path, scope), "grad", row)
                )
                if layout.weights:
                    name = tag("weight_hist", path, scope)
                    histograms.append(HistogramTag(name, "weight", row))
        return cls(entries, histograms, scope)

    @classmethod
    def of(cls, monitor: GradientMonitor, scope: str | None = None) -> TagTable:
        """The table of a built `monitor`, under `scope` (None: its
        configured `tag_scope`).

        Example:

        >>> TagTable.of(monitor, "actor").scope  # doctest: +SKIP
        'actor'
        """
        return cls.build(
            monitor.config,
            monitor.paths,
            list(monitor.group_members),
            monitor.layout,
            monitor.loss_scaled,
            scope=scope,
        )

    def scalar_values(
        self, values: np.ndarray, present: np.ndarray
    ) -> dict[str, float]:
        """`{tag: value}` of one summary: `values` is the flat vector, and
        `present[row]` says whether variable `row` had a gradient."""
        picked = np.asarray(values, dtype=np.float64)[self._index]
        keep = ~self._needs_grad | np.asarray(present, bool)[self._row]
        keep &= ~self._optional | np.isfinite(picked)
        return dict(zip(self._tags[keep].tolist(), picked[keep].tolist()))

    def values_of(
        self, values: np.ndarray, present: np.ndarray, tags: Collection[str]
    ) -> dict[str, float]:
        """`scalar_values` of just `tags`, without building the others: a
        few values for the training thread (Keras logs)."""
        key = frozenset(tags)
        if key not in self._picked:
            wanted = [s for s in self.scalars if s.tag in key]
            self._picked[key] = TagTable(wanted, (), self.scope)
        return self._picked[key].scalar_values(values, present)

    def graph_scalars(self, present: Collection[int]) -> list[ScalarTag]:
        """The scalar tags to write from the graph when the variables in
        `present` have gradients (known when the step is traced)."""
        return [s for s in self.scalars if not s.needs_grad or s.row in present]


def _variable_tags(
    config: MonitorConfig, paths: Sequence[str], layout: Layout, scope: str | None
) -> list[ScalarTag]:
    from keras_gradmon.schema import COLUMNS

    entries, width = [], len(COLUMNS)
    columns = [(name, COLUMNS.index(name)) for name in config.statistics]
    grad, weight = layout.offset("grad"), None
    if layout.weights:
        weight, ratio = layout.offset("weight"), layout.offset("ratio")
    for row, path in enumerate(paths):
        for name, column in columns:
            index = grad + row * width + column
            entries.append(
                ScalarTag(tag(f"grad_{name}", path, scope), index, row, True)
            )
        if weight is None:
            continue
        for name, column in columns:
            index = weight + row * width + column
            entries.append(ScalarTag(tag(f"weight_{name}", path, scope), index, row))
        name = tag("grad_to_weight", path, scope)
        entries.append(ScalarTag(name, ratio + row, row, True, optional=True))
    return entries


def _update_tags(
    config: MonitorConfig,
    paths: Sequence[str],
    groups: Sequence[str],
    layout: Layout,
    scope: str | None,
) -> list[ScalarTag]:
    """`update_ratio/<subject>`: global, each group, each variable (those
    only with `per_variable`); left out where not finite (a weight norm of
    0, or no gradient)."""
    start, count = layout.offset("update"), len(paths)
    places = [(GLOBAL, start + count + len(groups), -1)]
    places += [(group, start + count + i, -1) for i, group in enumerate(groups)]
    if config.per_variable:
        places += [(path, start + row, row) for row, path in enumerate(paths)]
    return [
        ScalarTag(tag("update_ratio", subject, scope), index, row, row >= 0, True)
        for subject, index, row in places
    ]
