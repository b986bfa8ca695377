"""The summary row, without a framework: what a monitor records (the
statistics, the step-wide totals, the per-variable columns), where each
number sits in the flat row (`Layout`), the tag each is written under
(`TagTable`), how tags are read back (`parse`), a row read back on the
host (`Snapshot`, `HistogramSnapshot`). The state,
the writers, the alert rules and the report all read it; nothing here
imports a framework.

What a monitor records, without TensorFlow: the statistic names, the
step-wide totals, the columns of the per-variable matrices and the `Layout`
of the flat vector every scalar of a summary lives in. Config, tags, the
state and the report read it; nothing here imports a framework.

Example:

>>> Layout(num_variables=2, num_groups=1, weights=False).size
38

Reading tags back (the report's side of `keras_gradmon.columns`): split a
tag into statistic, scope and subject, find the monitors' scopes among a
run's tags. No TensorFlow import: the report starts without it.

The TensorBoard tag scheme: the one table of what a monitor writes, and the
parser that reads its tags back (for the report).

Tags put the statistic first so that TensorBoard groups cards by statistic:
`grad_norm/global`, `grad_norm/<group>`, `clip/pre_norm`, `skipped/steps`,
`loss_scale/scale`, `grad_hist/<path>`, `weight_hist/<path>` (see
docs/tags.md). With a tag scope every tag becomes
`<statistic>/<scope>/<subject>`. The per-variable numbers are one `Table` a
step (`keras_gradmon/variables`), or with `per_variable_scalars` the tags
`grad_<stat>/<variable path>`, `weight_<stat>/...`, `grad_to_weight/<path>`,
`update_ratio/<path>`.

`TagTable.build` makes the table once, when the monitor is built: each scalar
tag with its index in the flat vector of `MonitorState` (see
`keras_gradmon.core.state.Layout`). Host recorders index the vector they read;
the in-graph writer gathers from the same indices.

What the host reads back: one summary's scalars (`Snapshot`) and one
histogram step's bucket counts (`HistogramSnapshot`), as NumPy data.

Example:

>>> from keras_gradmon.columns import Layout
>>> layout = Layout(num_variables=1, num_groups=0, weights=False)
>>> snapshot = Snapshot.of_captured(3, np.zeros(layout.size), ["w"], [], layout)
>>> snapshot.step, snapshot.totals["grad_norm"]
(3, 0.0)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Protocol

import numpy as np

#: The statistics computed for every tensor, in storage order. Each is one
#: module, `keras_gradmon/stats/statistics/<name>.py`: the reductions it
#: needs, how they finish into its value, its careful path and its NumPy
#: reference (`keras_gradmon.core.statistics` loads it by this name). Named
#: here, without a framework, for the config, the tags, the state's columns
#: and the report.
STATISTICS: tuple[str, ...] = (
    "norm",
    "mean",
    "std",
    "min",
    "max",
    "max_abs",
    "zero_fraction",
    "nonfinite",
)

#: Columns of the per-variable matrices: the statistics, then whether the
#: variable had a gradient at that step (1.0) or not (0.0).
COLUMNS: tuple[str, ...] = (*STATISTICS, "present")

#: The subject of the numbers that describe all variables together.
GLOBAL = "global"

#: The things a monitor may be set to do (`MonitorConfig.features`); each
#: number of the summary row is written when its feature is on.
FEATURES: tuple[str, ...] = (
    "always",
    "weights",  # weight statistics (`weight_statistics`)
    "per_variable",  # per-variable numbers (`per_variable`)
    "per_variable_scalars",  # ... as scalar tags, not a table
    "updates",  # update/weight ratios (`update_statistics`)
    "clip",  # a clipping rule
    "skip",  # steps may be skipped (`skip_nonfinite`, a loss scaler, spikes)
    "loss_scale",  # a wrapped loss scaler
    "spikes",  # `track_spikes`
    "skip_spikes",  # `skip_spikes`
    "noise",  # `noise_scale`
    "noise_examples",  # `noise_scale` with its `batch_size`
)


@dataclasses.dataclass(frozen=True)
class Total:
    """One step-wide number of the summary row.

    Attributes:
        name: Its name: its place in the row's `totals` field (the order of
            `TOTAL_COLUMNS`), and its key where the step computes it.
        statistic, subject: The tag it is written under
            (`<statistic>/[<scope>/]<subject>`).
        when: The feature that writes it (one of `FEATURES`); a number of a
            feature that is off is NaN in the row, and not written.
        doc: What it is.
    """

    name: str
    statistic: str
    subject: str
    when: str
    doc: str


#: The step-wide numbers of a summary, in storage order: the one table that
#: the state's `totals` field, the computed totals (by name), the tag table
#: and every writer derive from.
TOTAL_COLUMNS: tuple[Total, ...] = (
    Total("grad_norm", "grad_norm", GLOBAL, "always",
          "L2 norm of all finite gradient elements"),
    Total("weight_norm", "weight_norm", GLOBAL, "weights",
          "L2 norm of all weights"),
    Total("grad_nonfinite", "grad_nonfinite", GLOBAL, "always",
          "NaN/Inf gradient elements"),
    Total("grad_missing", "grad_missing", GLOBAL, "always",
          "variables without a gradient"),
    Total("clip_pre_norm", "clip", "pre_norm", "clip",
          "global norm before clipping"),
    Total("clip_post_norm", "clip", "post_norm", "clip",
          "global norm after clipping"),
    Total("clip_scale", "clip", "scale", "clip",
          "post / pre norm (1 at a norm of 0)"),
    Total("clip_fraction", "clip", "fraction", "clip",
          "steps clipped since the last summary"),
    Total("skipped_steps", "skipped", "steps", "skip",
          "steps skipped so far"),
    Total("loss_scale", "loss_scale", "scale", "loss_scale",
          "the loss scaler's scale"),
    Total("spike_max_norm", "spikes", "max_norm", "spikes",
          "largest norm since the last summary"),
    Total("spike_min_norm", "spikes", "min_norm", "spikes",
          "smallest norm since the last summary"),
    Total("spike_max_step", "spikes", "max_step", "spikes",
          "the step of the largest"),
    Total("spike_skipped", "skipped", "spikes", "skip_spikes",
          "steps skipped as spikes so far"),
    Total("noise_batch_ratio", "noise_scale", "batch_ratio", "noise",
          "B_simple / the update's batch"),
    Total("noise_b_simple", "noise_scale", "b_simple", "noise_examples",
          "B_simple in examples"),
    Total("noise_grad_sq", "noise_scale", "grad_sq", "noise",
          "EMA of the unbiased |G|^2"),
    Total("noise_trace", "noise_scale", "trace", "noise",
          "EMA of the unbiased tr(Sigma)"),
)

#: The names of the step-wide numbers, in storage order.
TOTALS: tuple[str, ...] = tuple(total.name for total in TOTAL_COLUMNS)


def totals_of(when: str) -> tuple[str, ...]:
    """The names of the totals that feature `when` writes.

    Example:

    >>> totals_of("spikes")
    ('spike_max_norm', 'spike_min_norm', 'spike_max_step')
    """
    return tuple(t.name for t in TOTAL_COLUMNS if t.when == when)


@dataclasses.dataclass(frozen=True)
class Layout:
    """The shapes of the monitor's state, and where each scalar field sits in
    the flat vector of all scalars.

    Example:

    >>> layout = Layout(num_variables=2, num_groups=1, weights=False)
    >>> layout.offset("grad"), layout.size
    (20, 38)
    """

    num_variables: int
    num_groups: int
    weights: bool
    buckets: int | None = None
    history: int = 1
    #: Whether the update/weight ratios are recorded (the `update` field).
    updates: bool = False

    def scalar_fields(self) -> list[tuple[str, tuple[int, ...]]]:
        """`(field, shape)` of each scalar field, in flat-vector order."""
        width = len(COLUMNS)
        fields = [
            ("totals", (len(TOTALS),)),
            ("groups", (self.num_groups, 2)),
            ("grad", (self.num_variables, width)),
        ]
        if self.weights:
            fields += [
                ("weight", (self.num_variables, width)),
                ("ratio", (self.num_variables,)),
            ]
        if self.updates:
            # The update/weight ratios: each variable's, each group's, the
            # global one.
            size = self.num_variables + self.num_groups + 1
            fields.append(("update", (size,)))
        return fields

    @functools.cached_property
    def spans(self) -> dict[str, tuple[int, tuple[int, ...]]]:
        """`{field: (start, shape)}` in the flat vector (computed once: the
        writer asks for every summary)."""
        spans, start = {}, 0
        for name, shape in self.scalar_fields():
            spans[name] = (start, shape)
            start += math.prod(shape)
        return spans

    def offset(self, field: str) -> int:
        """Where `field` starts in the flat vector."""
        if field not in self.spans:
            raise KeyError(f"No scalar field {field!r} in this layout.")
        return self.spans[field][0]

    @property
    def size(self) -> int:
        """The length of the flat vector."""
        return sum(math.prod(shape) for _, shape in self.spans.values())


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


# (No TensorFlow import at module level: the report parses tags with this
# module and should start without loading TensorFlow.)


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
        column: Its statistic, for a per-variable number (`row` >= 0): its
            column in the step's `Table`.
    """

    tag: str
    index: int
    row: int = -1
    needs_grad: bool = False
    optional: bool = False
    column: str = ""


@dataclasses.dataclass(frozen=True)
class HistogramTag:
    """One histogram a histogram step writes: `kind` "grad" or "weight"."""

    tag: str
    kind: str
    row: int


#: The TensorBoard plugin whose data a `Table` is (the dashboard's): its
#: summaries stay out of the Scalars tab.
PLUGIN_NAME = "keras_gradmon"

#: Table columns read only where the variable had a gradient (`grad_present`).
_NEEDS_GRAD = ("grad_", "update_ratio")
#: Table columns left out of the scalars where not finite (a weight norm of 0).
_OPTIONAL = ("grad_to_weight", "update_ratio")


@dataclasses.dataclass(frozen=True)
class Table:
    """One step's per-variable numbers: a row per variable path, a column per
    statistic (`grad_present`, 1.0 where the variable had a gradient, then
    `grad_norm`, ..., `weight_norm`, ..., `grad_to_weight`, `update_ratio`).
    Written as one tensor summary a step under `tag` (`keras_gradmon/variables`,
    `keras_gradmon/<scope>/variables`), its row and column names in the
    summary's metadata (`content`): a hundred per-variable numbers are one
    entry for the writer and the dashboard, not a hundred Scalars charts.

    Example:

    >>> table = Table(("dense/kernel",), ("grad_present", "grad_norm"),
    ...               np.float32([[1.0, 0.5]]))
    >>> table.tag, table.scalars()
    ('keras_gradmon/variables', {'grad_norm/dense/kernel': 0.5})
    >>> Table.from_content(table.content(), table.values) == table
    True
    """

    rows: tuple[str, ...]
    columns: tuple[str, ...]
    values: np.ndarray = dataclasses.field(compare=False)
    scope: str | None = None

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Table)
            and (self.rows, self.columns, self.scope)
            == (other.rows, other.columns, other.scope)
            and np.array_equal(self.values, other.values, equal_nan=True)
        )

    @property
    def tag(self) -> str:
        """The tag the table is written under."""
        return tag(PLUGIN_NAME, "variables", self.scope)

    def content(self) -> bytes:
        """The summary metadata's plugin content: the names, as JSON."""
        names = {"kind": "variables", "version": 1, "scope": self.scope}
        names.update(rows=list(self.rows), columns=list(self.columns))
        return json.dumps(names).encode()

    @classmethod
    def from_content(cls, content: bytes, values: Any) -> Table:
        """The table of a summary's plugin `content` and its tensor `values`.

        Raises:
            ValueError: `content` is not a table's, or does not fit `values`,
                or `values` are not numbers.
        """
        try:
            names = json.loads(content)
            rows, columns = tuple(names["rows"]), tuple(names["columns"])
            scope = names.get("scope")
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"not a keras_gradmon table: {content[:80]!r}") from error
        values = np.asarray(values)
        if values.dtype.kind not in "biuf":
            raise ValueError(f"a table holds {values.dtype} values, not numbers")
        if values.shape != (len(rows), len(columns)):
            raise ValueError(
                f"a table of {len(rows)} rows and {len(columns)} columns holds "
                f"values of shape {values.shape}"
            )
        return cls(rows, columns, values, scope)

    def kept(self) -> np.ndarray:
        """bool `[rows, columns]`: the numbers that are per-variable scalar
        tags (what `scalars` holds, and what the report and the dashboard
        read): not `grad_present`; the `grad_*` and update ratio columns
        only where the variable had a gradient; the ratios only where
        finite (a zero weight norm gives no ratio).

        Example:

        >>> Table(("w", "b"), ("grad_present", "grad_norm", "grad_to_weight"),
        ...       np.float32([[1, 0.5, 0.1], [0, 0, np.inf]])).kept().tolist()
        [[False, True, True], [False, False, False]]
        """
        values = np.asarray(self.values, dtype=np.float64)
        columns = self.columns
        keep = np.ones(values.shape, bool)
        keep[:, [name == "grad_present" for name in columns]] = False
        if "grad_present" in columns:
            absent = ~(values[:, columns.index("grad_present")] > 0)
            needs_grad = np.array([n.startswith(_NEEDS_GRAD) for n in columns], bool)
            keep &= ~(absent[:, None] & needs_grad[None, :])
        optional = np.array([n.startswith(_OPTIONAL) for n in columns], bool)
        keep &= ~optional[None, :] | np.isfinite(values)
        return keep

    def scalars(self) -> dict[str, float]:
        """`{tag: value}` of each number as a per-variable scalar tag (what
        `per_variable_scalars=True` writes): the numbers `kept` says."""
        values = np.asarray(self.values, dtype=np.float64)
        rows, columns = np.nonzero(self.kept())  # row by row, as written
        return {
            tag(self.columns[c], self.rows[r], self.scope): float(values[r, c])
            for r, c in zip(rows.tolist(), columns.tolist())
        }


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """A step's `Table`, before its numbers: `names`, its rows, columns and
    scope (its values zeros), and `index`, where each number sits in the
    flat vector.

    Example:

    >>> names = Table(("w",), ("grad_present", "grad_norm"), np.zeros((1, 2)))
    >>> spec = TableSpec(names, np.array([[1, 0]]))
    >>> spec.table(np.float32([0.5, 1.0])).values.tolist()
    [[1.0, 0.5]]
    """

    names: Table
    index: np.ndarray

    @classmethod
    def of(
        cls, scalars: Sequence[ScalarTag], paths: Sequence[str], layout: Layout,
        scope: str | None,
    ) -> TableSpec:
        """The table of the per-variable `scalars` (those with a `column`)."""
        columns = ["grad_present"]
        columns += dict.fromkeys(s.column for s in scalars if s.column)
        index = np.zeros((len(paths), len(columns)), np.int64)
        width, start = len(COLUMNS), layout.offset("grad")
        index[:, 0] = start + np.arange(len(paths)) * width + COLUMNS.index("present")
        place = {name: k for k, name in enumerate(columns)}
        for s in scalars:
            if s.column:
                index[s.row, place[s.column]] = s.index
        zeros = np.zeros(index.shape, np.float32)
        return cls(Table(tuple(paths), tuple(columns), zeros, scope), index)

    def table(self, values: np.ndarray) -> Table:
        """The table of one summary's flat vector `values`."""
        picked = np.asarray(values, dtype=np.float32)[self.index]
        return dataclasses.replace(self.names, values=picked)


class RowSpec(Protocol):
    """What the tag table needs of a monitor's options (`MonitorConfig`)."""

    statistics: tuple[str, ...]
    tag_scope: str | None

    def features(self, loss_scaled: bool = False) -> frozenset[str]: ...


class TagTable:
    """Every tag a monitor writes, with where its value comes from.

    Attributes:
        scope: The tag scope every tag is written under (None: unscoped):
            the configured `tag_scope`, or the scope derived when the
            monitor started writing beside another one (see
            `keras_gradmon.claims`). Read it here, not from the
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
        table: TableSpec | None = None,
    ) -> None:
        self.scope = scope
        self.scalars = tuple(scalars)
        #: The step's per-variable `Table`, where the per-variable numbers
        #: are written as one (None: as scalars, `per_variable_scalars`).
        self.table = table
        self._listed = np.array(
            [table is None or not s.column for s in self.scalars], bool
        )
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
        config: RowSpec,
        paths: Sequence[str],
        groups: Sequence[str],
        layout: Layout,
        loss_scaled: bool = False,
        scope: str | None = None,
    ) -> TagTable:
        """The table of a monitor with these options, variables and groups,
        under `scope` (None: `config.tag_scope`): the totals of
        `TOTAL_COLUMNS` whose feature is on, then the per-group,
        update-ratio and per-variable numbers, and the histograms."""
        scope, features = scope or config.tag_scope, config.features(loss_scaled)
        totals = layout.offset("totals")
        entries = [
            ScalarTag(tag(t.statistic, t.subject, scope), totals + i)
            for i, t in enumerate(TOTAL_COLUMNS)
            if t.when in features
        ]
        start = layout.offset("groups")
        for i, group in enumerate(groups):
            entries.append(ScalarTag(tag("grad_norm", group, scope), start + 2 * i))
            if layout.weights:
                index = start + 2 * i + 1
                entries.append(ScalarTag(tag("weight_norm", group, scope), index))
        per_variable = "per_variable" in features
        if layout.updates:
            entries += _update_tags(per_variable, paths, groups, layout, scope)
        if per_variable:
            entries += _variable_tags(config.statistics, paths, layout, scope)
        table = None
        if "per_variable_scalars" not in features and any(e.column for e in entries):
            table = TableSpec.of(entries, paths, layout, scope)
        return cls(entries, _histogram_tags(paths, layout, scope), scope, table)

    def scalar_values(
        self, values: np.ndarray, present: np.ndarray
    ) -> dict[str, float]:
        """`{tag: value}` of one summary's scalars (the per-variable numbers
        in `table` aside): `values` is the flat vector, and `present[row]`
        says whether variable `row` had a gradient."""
        picked = np.asarray(values, dtype=np.float64)[self._index]
        keep = self._listed & (~self._needs_grad | np.asarray(present, bool)[self._row])
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
        `present` have gradients (known when the step is traced), the
        per-variable numbers in `table` aside."""
        return [
            s
            for s, listed in zip(self.scalars, self._listed)
            if listed and (not s.needs_grad or s.row in present)
        ]


def _histogram_tags(
    paths: Sequence[str], layout: Layout, scope: str | None
) -> list[HistogramTag]:
    """`grad_hist/<path>` (and `weight_hist/<path>`) of every variable."""
    if layout.buckets is None:
        return []
    kinds = ("grad", "weight") if layout.weights else ("grad",)
    return [
        HistogramTag(tag(f"{kind}_hist", path, scope), kind, row)
        for row, path in enumerate(paths)
        for kind in kinds
    ]


def _variable_tags(
    statistics: Sequence[str], paths: Sequence[str], layout: Layout, scope: str | None
) -> list[ScalarTag]:
    entries, width = [], len(COLUMNS)
    columns = [(name, COLUMNS.index(name)) for name in statistics]
    grad, weight = layout.offset("grad"), None
    if layout.weights:
        weight, ratio = layout.offset("weight"), layout.offset("ratio")
    for row, path in enumerate(paths):
        for name, column in columns:
            index = grad + row * width + column
            name = f"grad_{name}"
            scalar = ScalarTag(tag(name, path, scope), index, row, True, column=name)
            entries.append(scalar)
        if weight is None:
            continue
        for name, column in columns:
            index = weight + row * width + column
            name = f"weight_{name}"
            entries.append(ScalarTag(tag(name, path, scope), index, row, column=name))
        name = tag("grad_to_weight", path, scope)
        entries.append(
            ScalarTag(name, ratio + row, row, True, True, column="grad_to_weight")
        )
    return entries


def _update_tags(
    per_variable: bool,
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
    if per_variable:
        places += [(path, start + row, row) for row, path in enumerate(paths)]
    return [
        ScalarTag(
            tag("update_ratio", subject, scope), index, row, row >= 0, True,
            column="update_ratio" if row >= 0 else "",
        )
        for subject, index, row in places
    ]


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The scalar statistics of one summary step, as NumPy data.

    Attributes:
        step: The optimizer step the statistics describe (-1: none yet).
        paths: The variable paths, in row order.
        groups: The group names, in row order.
        values: Every scalar, flat, in `Layout` order (the tag table's index).
        layout: Where each field sits in `values`.
    """

    step: int
    paths: tuple[str, ...]
    groups: tuple[str, ...]
    values: np.ndarray
    layout: Layout

    @classmethod
    def of_captured(
        cls, step: Any, values: Any, paths: Any, groups: Any, layout: Layout
    ) -> Snapshot:
        """A `Snapshot` of a captured `(step, values)` row."""
        return cls(int(step), tuple(paths), tuple(groups), np.asarray(values), layout)

    def field(self, name: str) -> np.ndarray | None:
        """One field of `values` in its shape, or None if not recorded."""
        span = self.layout.spans.get(name)
        if span is None:
            return None
        start, shape = span
        return self.values[start : start + math.prod(shape)].reshape(shape)

    @property
    def grad(self) -> np.ndarray:
        """`[num_variables, len(COLUMNS)]` gradient statistics (NaN rows for
        variables without a gradient)."""
        return self.field("grad")

    @property
    def weight(self) -> np.ndarray | None:
        """The same for the weights, or None if not recorded."""
        return self.field("weight")

    @property
    def group_grad_norm(self) -> np.ndarray:
        return self.field("groups")[:, 0]

    @property
    def totals(self) -> dict[str, float]:
        """`{name: value}` for each name in `TOTALS`."""
        return dict(zip(TOTALS, self.field("totals").tolist()))

    @property
    def has_grad(self) -> np.ndarray:
        """Boolean `[num_variables]`: whether each variable had a gradient."""
        return self.grad[:, COLUMNS.index("present")] > 0

    def grad_stat(self, name: str) -> dict[str, float]:
        """`{variable path: value}` of one gradient statistic."""
        column = self.grad[:, COLUMNS.index(name)]
        return {
            p: float(v) for p, v, ok in zip(self.paths, column, self.has_grad) if ok
        }


@dataclasses.dataclass(frozen=True)
class HistogramSnapshot:
    """Histogram bucket counts of one histogram step, as NumPy data.

    Attributes:
        step: The optimizer step the histograms describe (-1: none yet).
        paths: The variable paths, in row order.
        grad_counts: int `[num_variables, buckets]` gradient bucket counts.
        grad_range: `[num_variables, 2]` min and max of each gradient.
        weight_counts, weight_range: the same for the weights, or None.
        has_grad: Boolean `[num_variables]`.
    """

    step: int
    paths: tuple[str, ...]
    grad_counts: np.ndarray
    grad_range: np.ndarray
    weight_counts: np.ndarray | None
    weight_range: np.ndarray | None
    has_grad: np.ndarray

    @classmethod
    def of_captured(
        cls, step: Any, counts: Any, ranges: Any, paths: Any, weights: bool
    ) -> HistogramSnapshot:
        """A `HistogramSnapshot` of a captured `(step, counts, ranges)` row
        (the gradients' rows, then the weights' if `weights`)."""
        counts, ranges, n = np.asarray(counts), np.asarray(ranges), len(paths)
        return cls(
            step=int(step),
            paths=tuple(paths),
            grad_counts=counts[:n],
            grad_range=ranges[:n, :2],
            weight_counts=counts[n:] if weights else None,
            weight_range=ranges[n:, :2] if weights else None,
            has_grad=ranges[:n, 2] > 0,
        )


# The rings of recent rows, read on the host ------------------------------------

#: The step of a ring row never written.
NO_STEP = -1

#: Where a ring's count is in its steps variable (`core.state.Ring`): first,
#: then the step of each row.
COUNT = 0


@dataclasses.dataclass(frozen=True)
class Entry:
    """One recorded row: its step and its payloads, as NumPy data."""

    step: int
    payloads: tuple[np.ndarray, ...]


class Cursor:
    """What a host reader has seen of a `Ring`.

    Attributes:
        seen: The ring's count at the last look.
        dropped: Rows overwritten before this reader saw them, so far.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.seen = 0
        self.dropped = 0

    def new(
        self, count: Any, steps: Any, payloads: Sequence[Any]
    ) -> tuple[list[Entry], int]:
        """The rows pushed since the last look, oldest first, and how many
        more were pushed but already overwritten (also added to `dropped`)."""
        count = int(count)
        first = max(self.seen, count - self.capacity)
        lost = max(0, first - self.seen)
        self.dropped += lost
        self.seen = max(self.seen, count)
        if first >= count:
            return [], lost
        steps, arrays = np.asarray(steps), [np.asarray(p) for p in payloads]
        entries = []
        for index in range(first, count):
            slot = index % self.capacity
            rows = tuple(array[slot] for array in arrays)
            entries.append(Entry(int(steps[slot]), rows))
        return entries, lost


def unpack(captured: Sequence[Any]) -> tuple[int, np.ndarray, tuple]:
    """`(count, steps, payloads)` of a captured ring (`Ring.capture`: the
    count and the steps in one array, `COUNT` first, then the payloads).

    Example:

    >>> unpack([np.array([2, 5, 7]), np.array([[0.5], [0.25]])])[:2]
    (2, array([5, 7]))
    """
    steps = np.asarray(captured[0])
    return int(steps[COUNT]), steps[COUNT + 1 :], tuple(captured[1:])


def latest_entry(
    capacity: int, count: Any, steps: Any, payloads: Sequence[Any]
) -> Entry | None:
    """The newest row of a captured ring, or None when nothing was pushed."""
    count = int(count)
    if count == 0:
        return None
    slot = (count - 1) % capacity
    rows = tuple(np.asarray(p)[slot] for p in payloads)
    return Entry(int(np.asarray(steps)[slot]), rows)
