"""What the dashboard reads of a run, through TensorBoard's data provider
only (never a path): the per-variable numbers (the `Table` tensors, or old
logs' per-variable scalars), the gradient histograms, the activation
statistics and the alerts.

Each read says what it could not read (`unreadable`), so that a damaged
record is counted on the page, not dropped without a word.

Example:

>>> source = Source(provider, ctx, experiment_id="", samples=1000)  # doctest: +SKIP
>>> grid = variable_grid(source, "run_a")  # doctest: +SKIP
>>> grid.rows[:1], grid.steps[:3]  # doctest: +SKIP
(['mlp/hidden/kernel'], [0, 1, 2])
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
from tensorboard.data import provider as tb_provider

from keras_gradmon.alerts.events import ALERT_LOG
from keras_gradmon.alerts.log import decode_alerts, legacy_alert_lines, merge_alerts
from keras_gradmon.columns import (
    GLOBAL,
    PLUGIN_NAME,
    Table,
    monitor_scopes,
    parse,
    variable_statistic,
)

#: The per-variable numbers the heatmap can show, in menu order.
METRICS: tuple[str, ...] = (
    "grad_norm",
    "update_ratio",
    "grad_to_weight",
    "weight_norm",
)
#: TensorBoard's plugin names of the other summaries read.
SCALARS, HISTOGRAMS, TEXT = "scalars", "histograms", "text"
#: The gradient histogram tag statistic (`grad_hist/<variable path>`).
GRAD_HIST = "grad_hist"
#: The start of the activation statistics' tags (`activation_<stat>/<layer>`).
ACTIVATION = "activation_"
#: Steps TensorBoard keeps per tag of a plugin that `--samples_per_plugin`
#: does not name (its `data_ingester.DEFAULT_TENSOR_SIZE_GUIDANCE`; 10 for
#: plugins not listed there).
KEPT = {SCALARS: 1000, HISTOGRAMS: 500}
KEPT_OTHERS = 10
#: What a read asks for where a plugin's samples are 0 ("all").
ALL = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Sampled:
    """A tag read at TensorBoard's sampling bound, or whose last step (the
    provider's `max_step`) was not read: the run may hold more steps.

    Attributes:
        plugin: The tag's plugin.
        read: The steps read.
        first: The first step read.
        last: The last step of the tag (read or not).
        bound: The most steps TensorBoard serves per tag of `plugin`.
    """

    plugin: str
    read: int
    first: int
    last: int
    bound: int


@dataclasses.dataclass(frozen=True)
class Source:
    """One request's view of TensorBoard's data provider.

    Attributes:
        provider: The `tensorboard.data.provider.DataProvider`.
        ctx: The request's `RequestContext`.
        experiment_id: The request's experiment.
        samples: The most steps read per tag of the `keras_gradmon` plugin.
        hints: TensorBoard's `--samples_per_plugin` (`context.sampling_hints`):
            the most steps kept per tag of the other plugins.
        sampled: `{tag: Sampled}` of every tag read so far that may hold
            more steps than were read.
    """

    provider: Any
    ctx: Any
    experiment_id: str
    samples: int
    hints: dict[str, int] = dataclasses.field(default_factory=dict)
    sampled: dict[str, Sampled] = dataclasses.field(default_factory=dict)

    def bound(self, plugin: str) -> int:
        """The most steps TensorBoard serves per tag of `plugin`."""
        if plugin == PLUGIN_NAME:
            return self.samples
        return self.hints.get(plugin, KEPT.get(plugin, KEPT_OTHERS)) or ALL

    def runs(self) -> list[str]:
        """Every run name the provider lists."""
        found = self.provider.list_runs(self.ctx, experiment_id=self.experiment_id)
        return sorted(run.run_name for run in found)

    def listed(self, plugin: str, run: str) -> dict[str, Any]:
        """`{tag: time series}` of `plugin`'s data in `run`."""
        lister = (
            self.provider.list_scalars
            if plugin == SCALARS
            else self.provider.list_tensors
        )
        found = lister(
            self.ctx,
            experiment_id=self.experiment_id,
            plugin_name=plugin,
            run_tag_filter=tb_provider.RunTagFilter(runs=[run]),
        )
        return dict(found.get(run, {}))

    def tensors(self, plugin: str, run: str, tags: Iterable[str]) -> dict[str, list]:
        """`{tag: [TensorDatum]}` of `tags` in `run`, by step."""
        return self._read(self.provider.read_tensors, plugin, run, tags)

    def scalars(self, run: str, tags: Iterable[str]) -> dict[str, dict[int, float]]:
        """`{tag: {step: value}}` of scalar `tags` in `run`."""
        read = self._read(self.provider.read_scalars, SCALARS, run, tags)
        return {
            tag: {d.step: float(d.value) for d in data} for tag, data in read.items()
        }

    def _read(self, reader: Any, plugin: str, run: str, tags: Iterable[str]) -> dict:
        tags = list(tags)
        if not tags:
            return {}
        bound = self.bound(plugin)
        found = reader(
            self.ctx,
            experiment_id=self.experiment_id,
            plugin_name=plugin,
            downsample=bound,
            run_tag_filter=tb_provider.RunTagFilter(runs=[run], tags=tags),
        )
        read = {
            tag: sorted(data, key=lambda d: d.step)
            for tag, data in found.get(run, {}).items()
        }
        listed = self.listed(plugin, run)
        for tag, data in read.items():
            top = getattr(listed.get(tag), "max_step", None)
            last = data[-1].step if data else None
            if data and (len(data) >= bound or (top is not None and top > last)):
                top = last if top is None else max(top, last)
                self.sampled[tag] = Sampled(plugin, len(data), data[0].step, top, bound)
        return read


def content_kind(content: bytes) -> str | None:
    """The "kind" of a keras_gradmon summary's plugin content (None: not
    JSON holding one).

    Example:

    >>> content_kind(b'{"kind": "variables", "version": 1}')
    'variables'
    """
    try:
        kind = json.loads(content).get("kind")
    except (ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


@dataclasses.dataclass
class Grid:
    """A run's per-variable numbers, a row per variable (model order), a
    column per step.

    Attributes:
        rows: Each variable's key: its path, `<scope>/<path>` when scoped
            (its tags are `<statistic>/<key>`).
        steps: The steps read, ascending.
        values: `{metric: float64 [rows, steps]}`; NaN where not recorded
            (no gradient, a step without that number) or where NaN was
            written (`recorded` tells them apart).
        recorded: `{metric: bool [rows, steps]}`: whether a number was read.
        source: "table" (the `keras_gradmon/variables` tensors) or
            "scalars" (old logs' per-variable scalar tags), or "" (none).
        scalars: `{tag: {step: value}}` of each table number as its scalar
            tag (`Table.scalars`), for the report.
        unreadable: Table records that could not be read.
    """

    rows: list[str]
    steps: list[int]
    values: dict[str, np.ndarray]
    recorded: dict[str, np.ndarray]
    source: str
    scalars: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)
    unreadable: int = 0

    def nonfinite(self, metric: str | None = None) -> int:
        """How many numbers read are NaN or +-Inf (of `metric`, or of all)."""
        metrics = [metric] if metric else METRICS
        return sum(
            int(np.sum(self.recorded[m] & ~np.isfinite(self.values[m])))
            for m in metrics
        )


def _grid(
    cells: dict[tuple[str, str, int], float], rows: list[str], source: str
) -> Grid:
    steps = sorted({step for _, _, step in cells})
    at = {step: i for i, step in enumerate(steps)}
    index = {row: i for i, row in enumerate(rows)}
    shape = (len(rows), len(steps))
    values = {m: np.full(shape, np.nan) for m in METRICS}
    recorded = {m: np.zeros(shape, bool) for m in METRICS}
    for (metric, row, step), value in cells.items():
        values[metric][index[row], at[step]] = value
        recorded[metric][index[row], at[step]] = True
    return Grid(rows, steps, values, recorded, source)


def _column(table: Table, name: str) -> int | None:
    return table.columns.index(name) if name in table.columns else None


#: The count of non-finite elements behind each metric: a norm or ratio is
#: of the finite elements only, so a cell where the count is above 0 is
#: shown as NaN/Inf, not as the (often 0) number of what was left.
NONFINITE_OF = {
    "grad_norm": "grad_nonfinite",
    "grad_to_weight": "grad_nonfinite",
    "update_ratio": "weight_nonfinite",
    "weight_norm": "weight_nonfinite",
}


def _table_grid(source: Source, run: str, contents: dict[str, bytes]) -> Grid:
    """The grid of the run's `Table` tensors (`contents`: each table tag's
    plugin content, the names)."""
    cells, rows, scalars, unreadable = {}, {}, {}, 0
    for tag, data in source.tensors(PLUGIN_NAME, run, contents).items():
        for datum in data:
            try:
                table = Table.from_content(contents[tag], datum.numpy)
            except ValueError:
                unreadable += 1
                continue
            # The cells `Table.scalars` writes as tags, no other: the
            # heatmap shows what the report reads.
            kept, values = table.kept(), np.asarray(table.values, np.float64)
            for i, path in enumerate(table.rows):
                key = f"{table.scope}/{path}" if table.scope else path
                rows.setdefault(key, None)
                for metric in METRICS:
                    column = _column(table, metric)
                    if column is not None and kept[i, column]:
                        value = float(values[i, column])
                        bad = _column(table, NONFINITE_OF[metric])
                        if bad is not None and values[i, bad] > 0:
                            value = math.nan
                        cells[(metric, key, datum.step)] = value
            for name, number in table.scalars().items():
                scalars.setdefault(name, {})[datum.step] = number
    grid = _grid(cells, list(rows), "table")
    grid.scalars, grid.unreadable = scalars, unreadable
    return grid


def variable_keys(tags: Iterable[str]) -> list[str]:
    """The variable keys of old logs' per-variable scalar tags, in the
    order the tags are listed (model order, as written), as the report's
    analysis tells them: under each monitor's scope (`grad_norm/[<scope>/]
    global`), the subjects of a per-variable statistic, and the `grad_norm`
    subjects holding a '/'; not `global`, not a group. A scoped key is
    `<scope>/<path>`, as the tables' are.

    Example:

    >>> variable_keys(["grad_norm/global", "grad_norm/dense/kernel",
    ...                "grad_norm/hidden", "grad_to_weight/hidden_b",
    ...                "grad_norm/critic/global", "grad_norm/critic/body",
    ...                "grad_norm/critic/q/kernel"])
    ['dense/kernel', 'hidden_b', 'critic/q/kernel']
    """
    tags = list(tags)
    scopes = {s for s in monitor_scopes(tags) if s}
    parsed = [parse(name, scopes) for name in tags]
    per_variable = {
        (p.scope, p.subject) for p in parsed if variable_statistic(p.statistic)
    }
    keys = {}
    for p in parsed:
        if p.statistic not in METRICS or p.subject == GLOBAL:
            continue
        if (p.scope, p.subject) in per_variable or "/" in p.subject:
            keys.setdefault(f"{p.scope}/{p.subject}" if p.scope else p.subject, None)
    return list(keys)


def _scalar_grid(source: Source, run: str, tags: Iterable[str]) -> Grid:
    """The grid of old logs' per-variable scalars (`grad_norm/<path>`, ...)."""
    keys = variable_keys(tags)
    wanted = [f"{metric}/{key}" for metric in METRICS for key in keys]
    listed = set(tags)
    read = source.scalars(run, [t for t in wanted if t in listed])
    cells = {}
    for name, series in read.items():
        metric, _, key = name.partition("/")
        for step, value in series.items():
            cells[(metric, key, step)] = value
    return _grid(cells, keys, "scalars" if keys else "")


def variable_grid(source: Source, run: str, scalar_tags: Iterable[str] = ()) -> Grid:
    """A run's per-variable numbers: its tables, else its per-variable
    scalar tags (`scalar_tags`: the run's scalar tags, listed)."""
    listed = source.listed(PLUGIN_NAME, run)
    contents = {
        tag: series.plugin_content
        for tag, series in listed.items()
        if content_kind(series.plugin_content) == "variables"
    }
    if contents:
        return _table_grid(source, run, contents)
    return _scalar_grid(source, run, scalar_tags)


@dataclasses.dataclass
class Alerts:
    """A run's alert records (`Alert.to_dict()` dicts, each with the
    "scope" of its tag), in step order, and how many could not be read."""

    records: list[dict]
    unreadable: int = 0


def read_alerts(source: Source, run: str) -> Alerts:
    """The alerts of `run`: the `keras_gradmon/[<scope>/]alerts` records
    and the legacy `alert_log/[<scope>/]all` texts, the events of a step
    united as the report unites them (`merge_alerts`)."""
    alerts, events = Alerts([]), []
    texts = [t for t in source.listed(TEXT, run) if t.split("/", 1)[0] == ALERT_LOG]
    for tag, data in source.tensors(TEXT, run, texts).items():
        before = len(events) + alerts.unreadable
        for datum in data:
            lines = legacy_alert_lines(tag, datum.numpy)
            alerts.unreadable += lines.bad
            if lines.alerts:
                events.append((datum.step, lines.alerts))
        if len(events) + alerts.unreadable == before:
            # Today's Markdown texts: no record there, none missed either.
            source.sampled.pop(tag, None)
    records = {
        tag: series.plugin_content
        for tag, series in source.listed(PLUGIN_NAME, run).items()
        if content_kind(series.plugin_content) == "alerts"
    }
    for tag, data in source.tensors(PLUGIN_NAME, run, records).items():
        for datum in data:
            try:
                events.append((datum.step, decode_alerts(records[tag], datum.numpy)))
            except (ValueError, TypeError, UnicodeDecodeError):
                alerts.unreadable += 1
    alerts.records = merge_alerts(events)
    return alerts


@dataclasses.dataclass(frozen=True)
class Listing:
    """The tags of one run: `scalars` (the scalars plugin's) and
    `histograms`."""

    scalars: list[str]
    histograms: list[str]


def sample_note(sampled: dict[str, Sampled]) -> str | None:
    """What the page says where tags may hold more steps than were read
    (None: every step of every tag read was read).

    Example:

    >>> sample_note({"keras_gradmon/variables": Sampled(PLUGIN_NAME, 5, 0, 19, 5)})
    ... # doctest: +NORMALIZE_WHITESPACE
    'A sample: 1 tag(s) were read at the most steps TensorBoard serves per tag,
    and may hold more (keras_gradmon/variables: 5 steps read of steps 0 to 19;
    TensorBoard serves 5 per tag of keras_gradmon, `--samples_per_plugin
    keras_gradmon=N` to change it). The heatmap and the health line are of
    the steps read: `keras-gradmon report <logdir>` reads every step for the
    exact verdict.'
    """
    if not sampled:
        return None
    tag, first = next(iter(sampled.items()))
    return (
        f"A sample: {len(sampled)} tag(s) were read at the most steps "
        "TensorBoard serves per tag, and may hold more "
        f"({tag}: {first.read} steps read of steps {first.first} to {first.last}; "
        f"TensorBoard serves {first.bound} per tag of {first.plugin}, "
        f"`--samples_per_plugin {first.plugin}=N` to change it). The heatmap "
        "and the health line are of the steps read: `keras-gradmon report "
        "<logdir>` reads every step for the exact verdict."
    )


def listing(source: Source, run: str) -> Listing:
    """The run's scalar and histogram tags, in the provider's order (the
    order they were first written: model order)."""
    return Listing(
        list(source.listed(SCALARS, run)), list(source.listed(HISTOGRAMS, run))
    )


def histogram_series(source: Source, run: str, tag: str) -> list[dict]:
    """`[{"step", "buckets": [[left, right, count], ...]}]` of one histogram
    tag (buckets with a non-finite edge or count left out, and counted in
    "dropped")."""
    out = []
    for datum in source.tensors(HISTOGRAMS, run, [tag]).get(tag, []):
        buckets = np.asarray(datum.numpy, np.float64)
        if buckets.ndim != 2 or buckets.shape[1] != 3:
            out.append({"step": int(datum.step), "buckets": [], "dropped": 1})
            continue
        finite = np.isfinite(buckets).all(axis=1)
        out.append(
            {
                "step": int(datum.step),
                "buckets": buckets[finite].tolist(),
                "dropped": int(np.sum(~finite)),
            }
        )
    return out
