"""What a run's numbers say: the norm summary, clipping, alerts, the
unhealthy layers, the final loss and the in-step signals.

Pure NumPy over a `Run`; the thresholds are the report's defaults, each a
field of `HealthCriteria`.

The unhealthy layers of a run: gradient and activation findings.

Pure NumPy over a `Run`, with the thresholds of `HealthCriteria`.

A run's final loss: Keras's `epoch_loss`, or tf-agents' `Losses/*` tags.

tf-agents' agents write their losses with
`tf.compat.v2.summary.scalar(name=..., ...)` under `tf.name_scope('Losses/')`
(SAC and CQL-SAC: `'Losses'`), so the tags are `Losses/<name>`. What they
write differs by agent:

- DQN, DDQN, categorical DQN, REINFORCE, behavioral cloning and every agent
  on `TFAgent`'s default summaries: the parts and `Losses/total_loss`;
- the bandit agents: one `Losses/loss`;
- DDPG, TD3, SAC, CQL-SAC and PPO: only the parts (`critic_loss`,
  `actor_loss`, `alpha_loss`, ...; PPO also `entropy`, which is not a loss,
  and `total_abs_loss`, the sum of the parts' absolute values).

So the final loss is, in this order: Keras's `epoch_loss` (or `loss`); the
last `Losses/total_loss`; the last `Losses/loss`; else the sum of the
`Losses/<name>_loss` parts (not `total_abs_loss`) at the last step they all
recorded, which is the `LossInfo.loss` that DDPG, SAC and PPO return; else
the `epoch_loss` of the run Keras's `TensorBoard(log_dir)` callback wrote
beside the run (`log_dir/train`: `logs/run1/train` beside
`logs/run1/gradients`), since our callbacks write no loss of their own. The
parts are listed with the sum, so a total an agent weights differently
(CQL-SAC weights `cql_loss` by `cql_alpha`; TD3 writes no `critic_loss`)
can be read from them.

The signals of issue 21 in one run: update/weight ratio, spikes between
summaries, skipped spikes, gradient noise scale, share of steps clipped.

Pure NumPy over a `Run`; a signal the run did not write is None (or, for
the update ratio, has no entry), and the report then says nothing of it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from keras_gradmon import defaults
from keras_gradmon.alerts.defaults import default_rules
from keras_gradmon.alerts.events import TIERS, Alert
from keras_gradmon.alerts.rules import HIGH, LOW, steps_covered
from keras_gradmon.columns import (
    GLOBAL,
    monitor_scopes,
    tag,
    variable_statistic,
)
from keras_gradmon.formatting import format_number
from keras_gradmon.naming import split_scope
from keras_gradmon.report.accumulator import Run
from keras_gradmon.report.alert_store import AlertCounts, counts_of
from keras_gradmon.report.rl import group_key
from keras_gradmon.report.series import Series
from keras_gradmon.report.timeline import Timeline
from keras_gradmon.rl.tags import is_rl_alert_scope


@dataclasses.dataclass(frozen=True)
class Finding:
    """One unhealthy layer (or variable group), with a one-line reason."""

    layer: str
    kind: str  # "non-finite", "exploding", "vanishing", "dead units", ...
    reason: str


def prefix(statistic: str, scope: str | None) -> str:
    """The start of the tags of `statistic` under `scope` (the tag scheme of
    `keras_gradmon.columns`)."""
    return tag(statistic, "", scope)


def layer_of(path: str) -> str:
    """The layer of a variable path: everything before the last segment."""
    return path.rsplit("/", 1)[0] if "/" in path else path


def subjects(run: Run, statistic: str, scope: str | None) -> list[str]:
    """The subjects of `statistic` under `scope` ("global" aside)."""
    start = prefix(statistic, scope)
    tags = list(run.scalars) + run.histogram_tags
    return sorted(
        {
            tag[len(start) :]
            for tag in tags
            if tag.startswith(start) and tag[len(start) :] != "global"
        }
    )


def _quarter(values: np.ndarray, late: bool) -> np.ndarray:
    k = max(1, len(values) // 4)
    return values[-k:] if late else values[:k]


def _nonfinite_layers(
    run: Run, variables: list[str], scope: str | None
) -> dict[str, tuple[int, int]]:
    """The layers with NaN/Inf gradients: `(summaries, first step)`, the
    summaries those of the layer's variable that had the most (exact, from
    every point: `Series.flagged`)."""
    start = prefix("grad_nonfinite", scope)
    bad_layers: dict[str, tuple[int, int]] = {}
    for path in variables:
        stats = run.stats(start + path)
        if stats.flagged:
            count, first = bad_layers.get(layer_of(path), (0, stats.first_flagged))
            bad_layers[layer_of(path)] = (
                max(count, stats.flagged),
                min(first, stats.first_flagged),
            )
    return bad_layers


def _norm_finding(
    layer: str,
    steps: np.ndarray,
    values: np.ndarray,
    late: dict[str, float],
    typical: float,
    criteria: HealthCriteria,
) -> Finding | None:
    """An exploding or vanishing layer, from its finite gradient norms."""
    early = float(np.median(_quarter(values, late=False)))
    peak = int(np.argmax(values))
    if early > 0 and values[peak] >= criteria.explosion_factor * early:
        return Finding(
            layer,
            "exploding",
            f"gradient norm grew {format_number(values[peak] / early)}x, from "
            f"{format_number(early)} early on to {format_number(values[peak])} "
            f"at step {int(steps[peak])}",
        )
    if typical > 0 and late[layer] < criteria.vanishing_ratio * typical:
        return Finding(
            layer,
            "vanishing",
            f"gradient norm {format_number(late[layer])} late in the run, "
            f"{format_number(late[layer] / typical)} of the median layer's "
            f"{format_number(typical)}",
        )
    return None


def gradient_findings(
    run: Run,
    layer_norms: dict[str, tuple[np.ndarray, np.ndarray]],
    variables: list[str],
    scope: str | None,
    criteria: HealthCriteria,
) -> list[Finding]:
    """Non-finite, exploding and vanishing layers."""
    bad_layers = _nonfinite_layers(run, variables, scope)
    findings = [
        Finding(
            layer,
            "non-finite",
            f"NaN/Inf gradients at {count} summaries, first at step {first}",
        )
        for layer, (count, first) in sorted(bad_layers.items())
    ]
    late = {
        layer: float(np.median(_quarter(v[np.isfinite(v)], late=True)))
        for layer, (_, v) in layer_norms.items()
        if np.isfinite(v).any()
    }
    typical = float(np.median(list(late.values()))) if late else 0.0
    for layer, (steps, values) in sorted(layer_norms.items()):
        finite = np.isfinite(values)
        if finite.sum() < 2 or layer in bad_layers:
            continue
        found = _norm_finding(
            layer, steps[finite], values[finite], late, typical, criteria
        )
        if found is not None:
            findings.append(found)
    return findings


def last(run: Run, tag: str) -> tuple[int, float] | None:
    """`(step, value)` of the last point of `tag`, or None."""
    return run.stats(tag).last


def _layer_findings(
    layer: str,
    get: Callable[[str], tuple[int, float] | None],
    criteria: HealthCriteria,
) -> list[Finding]:
    """Dead units, activation std out of band, saturation of one layer."""
    findings = []
    low, high = criteria.std_band
    dead, std, saturated = get("dead_fraction"), get("std"), get("saturated_fraction")
    low_value, high_value = get("min"), get("max")
    if dead and dead[1] > criteria.dead_fraction:
        findings.append(
            Finding(
                layer,
                "dead units",
                f"{dead[1]:.0%} of its units output 0 on every probe sample "
                f"at step {dead[0]}",
            )
        )
    unit_interval = (
        low_value is not None
        and high_value is not None
        and low_value[1] >= 0.0
        and high_value[1] <= 1.0
        and saturated is not None
    )
    if std and not unit_interval and not low <= std[1] <= high:
        findings.append(
            Finding(
                layer,
                "activation std",
                f"activation std {format_number(std[1])} at step {std[0]} is "
                f"outside the healthy band {low:g} to {high:g}",
            )
        )
    if saturated and saturated[1] > criteria.saturated_fraction:
        findings.append(
            Finding(
                layer,
                "saturated",
                f"{saturated[1]:.0%} of its outputs saturated at step {saturated[0]}",
            )
        )
    return findings


def activation_layers(run: Run, scope: str | None) -> list[str]:
    """The layers an `ActivationMonitor` measured under `scope` (its tags'
    subjects): layer paths, or bare names in older logs (`split_scope`)."""
    known = _known_scopes(run)
    return [
        layer
        for layer in subjects(run, "activation_std", scope)
        if scope is not None or split_scope(layer, known)[0] is None
    ]


def _known_scopes(run: Run) -> set[str | None]:
    """The tag scopes of `run` other than activation tags': of monitored
    optimizers, alert flags and alerts (`alerts/<scope>/<rule>`)."""
    known = monitor_scopes(run.scalars)
    for name in run.scalars:
        if name.startswith("alerts/") and name.count("/") == 2:
            known.add(name.split("/")[1])
    known.update(alert.get("scope") for alert in run.alerts)
    return {s for s in known if not is_rl_alert_scope(s)}


def layer_names(activation: Iterable[str], gradient: Iterable[str]) -> dict[str, str]:
    """`{activation layer: gradient layer}`: for each activation monitor's
    layer, the gradient layer (a variable path less its last segment) that
    is the same name; else the one that ends with `/<name>` (a layer's
    name under its model's path); else the one that starts with `<name>/`
    (an LSTM's variables sit in its cell: `seq/lstm/lstm_cell/kernel`).
    A name that matches no layer, or several at its first kind of match,
    keeps its own.

    Example:

    >>> layer_names(["hidden_2", "dense"], ["demo_mlp/hidden_2", "a/dense", "b/dense"])
    {'hidden_2': 'demo_mlp/hidden_2'}
    >>> layer_names(["seq/lstm", "seq/out"], ["seq/lstm/lstm_cell", "seq/out"])
    {'seq/lstm': 'seq/lstm/lstm_cell', 'seq/out': 'seq/out'}
    """
    gradient = list(gradient)
    names = {}
    for name in activation:
        for found in (
            [g for g in gradient if g == name],
            [g for g in gradient if g.endswith(f"/{name}")],
            [g for g in gradient if g.startswith(f"{name}/")],
        ):
            if found:
                if len(found) == 1:
                    names[name] = found[0]
                break
    return names


def activation_findings(
    run: Run,
    scope: str | None,
    criteria: HealthCriteria,
    names: Mapping[str, str] | None = None,
) -> list[Finding]:
    """The activation findings of every layer an `ActivationMonitor`
    measured, each under its name in `names` (`layer_names`) if there."""
    findings = []
    names = names or {}
    for layer in activation_layers(run, scope):

        def get(stat: str, layer: str = layer) -> tuple[int, float] | None:
            return last(run, prefix(f"activation_{stat}", scope) + layer)

        findings += _layer_findings(names.get(layer, layer), get, criteria)
    return findings


#: tf-agents' name scope of the loss summaries.
LOSSES = "Losses"
#: The tf-agents tags that are the total loss, first found first.
TOTALS = ("total_loss", "loss")
#: `Losses/` tags that are not parts of the total.
NOT_PARTS = ("total_abs_loss",)
#: Keras's loss tags (the `TensorBoard` callback), first found first.
KERAS = ("epoch_loss", "loss")
#: `FinalLoss.source` of a sum of parts.
SUM = "sum"


@dataclasses.dataclass(frozen=True)
class FinalLoss:
    """The final loss of a run, and where it comes from.

    Attributes:
        value: The loss.
        step: The step it was recorded at.
        source: Its tag (`epoch_loss`, `Losses/total_loss`, ...), or `SUM`.
        parts: The other `Losses/` values at `step` (with a total), or the
            summed parts (with `SUM`), by name.
        run: The run it was read from, when not the report's own (Keras's
            `TensorBoard` callback's `train` run beside it).
    """

    value: float
    step: int
    source: str
    parts: dict[str, float] = dataclasses.field(default_factory=dict)
    run: str | None = None

    @property
    def description(self) -> str:
        """The report's line, e.g. `final loss: 0.52 (tf-agents ...)`."""
        line = f"final loss: {format_number(self.value)}"
        parts = ", ".join(
            f"{name} {format_number(value)}" for name, value in self.parts.items()
        )
        if self.source == SUM:
            return f"{line} (sum of tf-agents {LOSSES}/ at step {self.step}: {parts})"
        if self.source.startswith(f"{LOSSES}/"):
            where = f"tf-agents {self.source} at step {self.step}"
            return f"{line} ({where}; {parts})" if parts else f"{line} ({where})"
        if self.run is not None:
            when = (
                f"epoch {self.step + 1}"
                if self.source == KERAS[0]
                else f"step {self.step}"
            )
            return f"{line} (Keras's {self.source} in run {self.run}, {when})"
        return line


def tf_agents_losses(run: Run) -> dict[str, dict[int, float]]:
    """`{name: {step: value}}` of the run's `Losses/<name>` tags."""
    found = {}
    for name, points in run.scalars.items():
        scope, _, rest = name.partition("/")
        if scope == LOSSES and rest and "/" not in rest:
            found[rest] = points
    return found


def _at(
    losses: dict[str, dict[int, float]], step: int, names: Iterable[str]
) -> dict[str, float]:
    return {name: losses[name][step] for name in sorted(names) if step in losses[name]}


def _total(losses: dict[str, dict[int, float]]) -> FinalLoss | None:
    for name in TOTALS:
        if losses.get(name):
            step = max(losses[name])
            others = _at(losses, step, set(losses) - {name})
            return FinalLoss(losses[name][step], step, f"{LOSSES}/{name}", others)
    return None


def _sum_of_parts(losses: dict[str, dict[int, float]]) -> FinalLoss | None:
    names = [
        name
        for name, points in losses.items()
        if name.endswith("_loss") and name not in NOT_PARTS and points
    ]
    if not names:
        return None
    common = set.intersection(*(set(losses[name]) for name in names))
    step = max(common) if common else max(max(losses[name]) for name in names)
    parts = _at(losses, step, names)
    return FinalLoss(sum(parts.values()), step, SUM, parts)


def keras_loss(run: Run) -> FinalLoss | None:
    """The last Keras loss (`KERAS`) of `run`, or None."""
    for name in KERAS:
        points = run.scalars.get(name)
        if points:
            step = max(points)
            return FinalLoss(points[step], step, name)
    return None


#: The run that Keras's `TensorBoard(log_dir)` callback writes the training
#: curves to: `log_dir/train` (and `log_dir/validation`).
KERAS_TRAIN = "train"


def keras_loss_beside(run: Run, runs: Sequence[Run]) -> FinalLoss | None:
    """The last Keras loss of the `train` run that Keras's `TensorBoard`
    callback wrote beside `run` (given `run`'s parent directory:
    `<parent>/train`) or below it (given `run`'s own: `<run>/train`), with
    `FinalLoss.run` set; None if there is none."""
    by_name = {other.name: other for other in runs}
    for name in (
        os.path.join(run.name, KERAS_TRAIN),
        os.path.join(os.path.dirname(run.name), KERAS_TRAIN),
    ):
        other = by_name.get(name)
        found = None if other is None or other is run else keras_loss(other)
        if found is not None:
            return dataclasses.replace(found, run=other.name)
    return None


def final_loss(run: Run, runs: Sequence[Run] = ()) -> FinalLoss | None:
    """The run's final loss (see the module's docstring), or None; `runs`
    (all the runs) for the Keras loss written beside it."""
    losses = tf_agents_losses(run)
    return (
        keras_loss(run)
        or _total(losses)
        or _sum_of_parts(losses)
        or keras_loss_beside(run, runs)
    )


#: The report's words for a monitored run without a loss.
NO_LOSS = (
    "final loss: none in the logs (Keras's TensorBoard(log_dir) callback "
    "writes it, as epoch_loss in log_dir/train: the report reads it from this "
    "run, or from the train run beside or below it)"
)


#: `update_ratio` healthy band of the report: the update-ratio rule's default.
UPDATE_RATIO_BAND = (LOW, HIGH)
#: `noise_scale/batch_ratio` beyond these: the batch is far below (above)
#: B_simple.
FAR_BELOW, FAR_ABOVE = 10.0, 0.1


@dataclasses.dataclass(frozen=True)
class Spread:
    """One signal over a run's summaries (finite values only)."""

    median: float
    low: float
    high: float
    last: float
    summaries: int
    outside: int = 0  # summaries outside the healthy band, where there is one

    @classmethod
    def of(
        cls, values: np.ndarray, band: tuple[float, float] | None = None
    ) -> Spread | None:
        """The spread of `values`, None if none is finite.

        Example:

        >>> Spread.of(np.array([1e-3, np.nan, 2e-3, 1e-9]), (1e-7, 1e-1)).outside
        1
        """
        finite = values[np.isfinite(values)]
        if not finite.size:
            return None
        outside = 0
        if band is not None:
            outside = int(np.sum((finite < band[0]) | (finite > band[1])))
        return cls(
            median=float(np.median(finite)),
            low=float(finite.min()),
            high=float(finite.max()),
            last=float(finite[-1]),
            summaries=int(finite.size),
            outside=outside,
        )

    @classmethod
    def of_series(
        cls, series: Series, band: tuple[float, float] | None = None
    ) -> Spread | None:
        """The spread of a tag's `Series`: exact from its aggregates, but for
        the median and `outside`, read from its kept points (`outside`
        scaled to all the finite values where the series is decimated).

        Example:

        >>> run = Run("r", {"t": {0: 1e-3, 1: np.nan, 2: 2e-3, 3: 1e-9}}, [], [])
        >>> Spread.of_series(run.stats("t"), (1e-7, 1e-1)) == Spread.of(
        ...     run.series("t")[1], (1e-7, 1e-1))
        True
        """
        if not series.finite:
            return None
        values = series.kept()[1]
        finite = values[np.isfinite(values)]
        if not finite.size:  # every finite point left out by the decimation
            finite = np.array([series.last_finite[1]])
        outside = 0
        if band is not None:
            outside = int(np.sum((finite < band[0]) | (finite > band[1])))
            if series.decimated:
                outside = round(outside * series.finite / finite.size)
        return cls(
            median=float(np.median(finite)),
            low=series.low,
            high=series.high,
            last=series.last_finite[1],
            summaries=series.finite,
            outside=outside,
        )


@dataclasses.dataclass(frozen=True)
class Signals:
    """Issue 21's signals of one monitored optimizer in one run.

    Attributes:
        update_ratio: `{"global" or group: Spread}` of `update_ratio`.
        band: The healthy band the update ratios are checked against.
        spike: `(largest spikes/max_norm, its spikes/max_step)`, or None.
        skipped_spikes: The last `skipped/spikes` (steps skipped as spikes).
        batch_ratio: `noise_scale/batch_ratio` over the run.
        b_simple: `noise_scale/b_simple` over the run (examples).
        clip_fraction: Share of the steps clipped, each summary's
            `clip/fraction` weighted by the steps it covers.
    """

    update_ratio: dict[str, Spread]
    band: tuple[float, float] = UPDATE_RATIO_BAND
    spike: tuple[float, int] | None = None
    skipped_spikes: int | None = None
    batch_ratio: Spread | None = None
    b_simple: Spread | None = None
    clip_fraction: float | None = None


def _largest_spike(run: Run, scope: str | None) -> tuple[float, int] | None:
    """The largest `spikes/max_norm` (exact) and its `spikes/max_step` (the
    summary's step where that point was left out by the decimation)."""
    norms = run.stats(prefix("spikes", scope) + "max_norm")
    if norms.high_step is None:
        return None
    at = run.stats(prefix("spikes", scope) + "max_step").get(norms.high_step)
    return norms.high, int(norms.high_step if at is None else at)


def run_signals(
    run: Run,
    scope: str | None,
    groups: list[str],
    band: tuple[float, float] = UPDATE_RATIO_BAND,
) -> Signals:
    """The signals of the optimizer with tag scope `scope` in `run`, the
    update ratio of "global" and of each of `groups`.

    Example:

    >>> run = Run("r", {"skipped/spikes": {100: 0.0, 200: 2.0}}, [], [])
    >>> run_signals(run, None, []).skipped_spikes
    2
    """
    ratios = {}
    for subject in [GLOBAL, *groups]:
        spread = Spread.of_series(
            run.stats(prefix("update_ratio", scope) + subject), band
        )
        if spread is not None:
            ratios[subject] = spread
    skipped = last(run, prefix("skipped", scope) + "spikes")
    noise = prefix("noise_scale", scope)
    return Signals(
        update_ratio=ratios,
        band=band,
        spike=_largest_spike(run, scope),
        skipped_spikes=None if skipped is None else int(skipped[1]),
        batch_ratio=Spread.of_series(run.stats(noise + "batch_ratio")),
        b_simple=Spread.of_series(run.stats(noise + "b_simple")),
        clip_fraction=run.stats(prefix("clip", scope) + "fraction").covered_mean,
    )


def clip_note(
    fraction: float | None, steps: np.ndarray, alerts: Sequence[Mapping]
) -> str | None:
    """Why a run that clipped more than the default `clip_fraction` rule
    allows has no such alert, when the reason is the rule's own: it decides
    only once the summaries cover its whole window (`ClipFractionRule`'s
    `window`, in steps), which a shorter run never does. None otherwise.

    Args:
        fraction: The run's share of steps clipped (`Series.covered_mean`
            of its clip fractions).
        steps: The steps of its `clip/fraction` summaries.
        alerts: Its alert records.

    Example:

    >>> print(clip_note(1.0, np.array([0, 5, 10]), []))
    no clip_fraction alert: the default rule warns when more than 50% of the last 1,000 steps were clipped, and decides only once it has seen 1,000 steps; this run has 11
    """  # noqa: E501
    rule = default_rules()["clip_fraction"]
    if fraction is None or fraction <= rule.fraction or not steps.size:
        return None
    if any(alert.get("rule") == rule.name for alert in alerts):
        return None
    covered = sum(
        steps_covered(int(step), int(steps[i - 1]) if i else None)
        for i, step in enumerate(steps)
    )
    if covered >= rule.window:
        return None
    return (
        f"no {rule.name} alert: the default rule warns when more than "
        f"{rule.fraction:.0%} of the last {rule.window:,} steps were clipped, "
        f"and decides only once it has seen {rule.window:,} steps; this run "
        f"has {covered:,}"
    )


def _ratio(signals: Signals) -> float | None:
    spread = signals.update_ratio.get(GLOBAL)
    return None if spread is None else spread.median


#: The columns of the groups' table: (title, value of one run's `Signals`).
COLUMNS = (
    ("update ratio", _ratio),
    ("max spike", lambda s: None if s.spike is None else s.spike[0]),
    ("skipped spikes", lambda s: s.skipped_spikes),
    ("clipped", lambda s: s.clip_fraction),
    ("batch_ratio", lambda s: None if s.batch_ratio is None else s.batch_ratio.last),
    ("b_simple", lambda s: None if s.b_simple is None else s.b_simple.last),
)


@dataclasses.dataclass(frozen=True)
class SignalGroup:
    """The signals of a group of runs (seeds), each the median over the runs
    that wrote it: `values[title] = (median, runs with it)` for the titles
    of `COLUMNS` (the update ratio: each run's median of "global"; the
    noise scale: each run's last value)."""

    key: str
    runs: list[str]
    values: dict[str, tuple[float, int]]


def signal_groups(
    members: dict[str, list[tuple[str, Signals]]],
) -> list[SignalGroup]:
    """`SignalGroup`s of `{key: [(run title, signals)]}`, in key order;
    groups without any signal are left out.

    Example:

    >>> runs = [("a_seed0", Signals({}, skipped_spikes=1)),
    ...         ("a_seed1", Signals({}, skipped_spikes=3))]
    >>> signal_groups({"a": runs})[0].values
    {'skipped spikes': (2.0, 2)}
    """
    groups = []
    for key, runs in sorted(members.items()):
        values = {}
        for title, get in COLUMNS:
            found = [get(signals) for _, signals in runs]
            found = [float(v) for v in found if v is not None]
            if found:
                values[title] = (float(np.median(found)), len(found))
        if values:
            groups.append(SignalGroup(key, [name for name, _ in runs], values))
    return groups


def group_signals(reports: list[RunReport], pattern: str) -> list[SignalGroup]:
    """The signals of the reports whose run name matches `pattern`
    (`re.search`), grouped by `--group`'s key (`rl.group_key`; a scoped
    optimizer's reports form a group of their own, "<key> [<scope>]").

    Example:

    >>> [g.key for g in group_signals(reports, r"(.*)_seed\\d+")]  # doctest: +SKIP
    ['adam', 'sgd [actor]']
    """
    compiled, members = re.compile(pattern), {}
    for report in reports:
        match = compiled.search(report.run)
        if match is None or report.signals is None:
            continue
        key = group_key(match)[0]
        key = f"{key} [{report.scope}]" if report.scope else key
        members.setdefault(key, []).append((report.title, report.signals))
    return signal_groups(members)


#: The tags of steps lost to the monitor's history buffer (`summary_history`):
#: `dropped/<kind>`, `dropped/<scope>/<kind>` (see `keras_gradmon.columns`),
#: cumulative counts.
DROPPED = "dropped"
SUMMARIES, HISTOGRAMS = "summaries", "histograms"


@dataclasses.dataclass(frozen=True)
class HealthCriteria:
    """When the report calls a layer unhealthy.

    Attributes:
        explosion_factor: Exploding: the layer's peak gradient norm is at
            least this many times its median over the first quarter of the
            run.
        vanishing_ratio: Vanishing: the layer's median gradient norm over
            the last quarter is below this fraction of the median layer's.
        dead_fraction: Dead units: more than this fraction of a layer's
            units dead at the last measurement.
        std_band: Activation std outside `(low, high)` at the last
            measurement (not for layers whose outputs lie in [0, 1]).
        saturated_fraction: More than this fraction of a tanh/sigmoid
            layer's outputs saturated at the last measurement.
        update_ratio_band: The healthy `(low, high)` of `update_ratio`.
    """

    explosion_factor: float = 100.0
    vanishing_ratio: float = 1e-4
    dead_fraction: float = defaults.DEAD_FRACTION
    std_band: tuple[float, float] = defaults.STD_BAND
    saturated_fraction: float = 0.5
    update_ratio_band: tuple[float, float] = UPDATE_RATIO_BAND


@dataclasses.dataclass(frozen=True)
class NormSummary:
    """The global gradient norm over a run."""

    median: float
    p99: float
    max: float
    peak_step: int
    summaries: int
    first_step: int
    last_step: int


@dataclasses.dataclass(frozen=True)
class RunReport:
    """What the report says about one monitored optimizer in one run.

    `final_loss` is `loss.value` (`loss` says where it comes from);
    `dropped_summaries` and `dropped_histograms` are the last
    `dropped/[<scope>/]summaries` and `.../histograms`: recorded summary and
    histogram steps lost to an overflowing history buffer. `clip_fraction`
    is the share of steps clipped (`Series.covered_mean` of the clip
    fractions); `signals` holds issue 21's signals (update ratio, spikes,
    noise scale, ...). `clip_note` says why a run clipped that much without
    a `clip_fraction` alert (`clip_note`); `layer_names` maps the activation
    monitor's layer names onto the gradient tags' (`layer_names`), for the
    findings and the alert timeline. `alerts` holds the alert records kept
    whole (`alert_store.AlertStore`), `alert_counts` the exact numbers of
    all of them (`counts`).
    """

    run: str
    scope: str | None
    norm: NormSummary | None
    clip_fraction: float | None
    skipped_steps: int | None
    nonfinite_summaries: int
    final_loss: float | None
    alerts: list[dict]
    findings: list[Finding]
    groups: dict[str, tuple[np.ndarray, np.ndarray]]
    layer_norms: dict[str, tuple[np.ndarray, np.ndarray]]
    loss: FinalLoss | None = None
    dropped_summaries: int | None = None
    dropped_histograms: int | None = None
    signals: Signals | None = None
    clip_note: str | None = None
    layer_names: dict[str, str] = dataclasses.field(default_factory=dict)
    alert_counts: AlertCounts | None = None

    @property
    def title(self) -> str:
        return f"{self.run} [{self.scope}]" if self.scope else self.run

    @property
    def counts(self) -> AlertCounts:
        """Exact numbers over every alert record (`alerts` holds those kept
        whole): `alert_counts`, else those of `alerts`."""
        return self.alert_counts or counts_of(self.alerts)

    def alert_count(self, tier: str) -> int:
        return self.counts.tiers.get(tier, 0)

    @functools.cached_property
    def timeline(self) -> Timeline:
        """The alerts grouped into incidents (`AlertCounts.timeline`),
        activation alerts under the gradient tags' layer names
        (`layer_names`)."""
        return self.counts.timeline(self._renamed)

    def _renamed(self, alert: Alert) -> Alert:
        subject = self.layer_names.get(alert.subject)
        activation = alert.metric.startswith("activation_")
        if subject and activation:
            return dataclasses.replace(alert, subject=subject)
        return alert


def scopes(run: Run) -> list[str | None]:
    """The tag scopes in `run` (None: unscoped): of the monitored optimizers
    (`grad_norm/<scope>/global`), of activation monitors and of alerts."""
    found = monitor_scopes(run.scalars)
    known = _known_scopes(run)
    for name in run.scalars:
        if name.startswith("activation_std/"):
            subject = name[len("activation_std/") :]
            found.add(split_scope(subject, known)[0])
    found.update(
        alert.get("scope")
        for alert in run.alerts
        if not is_rl_alert_scope(alert.get("scope"))
    )
    for kind in (SUMMARIES, HISTOGRAMS):
        found.update(s for s, count in dropped(run, kind).items() if count > 0)
    return sorted(found, key=lambda s: (s is not None, s or ""))


def dropped(run: Run, kind: str = SUMMARIES) -> dict[str | None, int]:
    """`{scope: last value}` of the run's `dropped/[<scope>/]<kind>` tags:
    how many recorded `kind` steps the history buffer lost, so far."""
    found = {}
    for name in run.scalars:
        statistic, _, rest = name.partition("/")
        if statistic != DROPPED or not rest.endswith(kind):
            continue
        head = rest[: -len(kind)]
        if head == "" or (head.endswith("/") and "/" not in head[:-1]):
            value = last(run, name)[1]
            found[head[:-1] or None] = int(value) if np.isfinite(value) else 0
    return found


def _variables(run: Run, scope: str | None) -> tuple[list[str], list[str]]:
    """`(variable paths, group names)` with a `grad_norm` of their own."""
    per_variable = set()
    names = {t.partition("/")[0] for t in [*run.scalars, *run.histogram_tags]}
    for statistic in filter(variable_statistic, names):
        per_variable.update(subjects(run, statistic, scope))
    others = {f"{s}/" for s in scopes(run) if s and s != scope}
    variables, groups = [], []
    for subject in subjects(run, "grad_norm", scope):
        if scope is None and subject.startswith(tuple(others)):
            continue  # a scoped optimizer's tag
        is_variable = subject in per_variable or "/" in subject
        (variables if is_variable else groups).append(subject)
    return variables, groups


def _layer_norms(
    run: Run, variables: list[str], scope: str | None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each layer's gradient norm per step: sqrt of the sum of its variables'
    squared norms, at the steps where all of them were recorded."""
    layers: dict[str, list[str]] = {}
    for path in variables:
        layers.setdefault(layer_of(path), []).append(path)
    out = {}
    start = prefix("grad_norm", scope)
    for layer, paths in layers.items():
        series = [run.scalars.get(start + p, {}) for p in paths]
        steps = sorted(set.intersection(*(set(s) for s in series)))
        values = np.sqrt(
            np.array(
                [sum(s[step] ** 2 for s in series) for step in steps], dtype=np.float64
            )
        )
        out[layer] = (np.array(steps, dtype=np.int64), values)
    return out


def _norm_summary(series: Series) -> NormSummary | None:
    """Exact from the aggregates, but for the median and p99: read from the
    kept points (estimated where the series is decimated)."""
    values = series.kept()[1]
    finite = values[np.isfinite(values)]
    if series.high_step is None or not finite.size:
        return None
    return NormSummary(
        median=float(np.median(finite)),
        p99=float(np.percentile(finite, 99)),
        max=series.high,
        peak_step=series.high_step,
        summaries=series.count,
        first_step=series.first_step,
        last_step=series.last[0],
    )


def analyze_run(
    run: Run,
    scope: str | None = None,
    criteria: HealthCriteria | None = None,
    runs: Sequence[Run] = (),
) -> RunReport:
    """The report of the optimizer with tag scope `scope` in `run`; `runs`
    (all the runs) for a final loss written beside it (`final_loss`)."""
    criteria = criteria or HealthCriteria()
    norms = run.stats(prefix("grad_norm", scope) + "global")
    steps, values = norms.kept()
    variables, group_names = _variables(run, scope)
    layer_norms = _layer_norms(run, variables, scope)
    groups = {"global": (steps, values)}
    for group in group_names:
        groups[group] = run.series(prefix("grad_norm", scope) + group)
    signals = run_signals(run, scope, group_names, criteria.update_ratio_band)
    skipped = last(run, prefix("skipped", scope) + "steps")
    nonfinite = run.stats(prefix("grad_nonfinite", scope) + "global").flagged
    loss = final_loss(run, runs)
    alerts = [a for a in run.alerts if a.get("scope") == scope]
    counts = run.alert_store.counts(scope)
    names = layer_names(
        activation_layers(run, scope), {layer_of(path) for path in variables}
    )
    clip_steps = run.series(prefix("clip", scope) + "fraction")[0]
    return RunReport(
        run=run.name,
        scope=scope,
        norm=_norm_summary(norms),
        clip_fraction=signals.clip_fraction,
        skipped_steps=int(skipped[1]) if skipped else None,
        nonfinite_summaries=nonfinite,
        final_loss=loss.value if loss else None,
        alerts=alerts,
        findings=gradient_findings(run, layer_norms, variables, scope, criteria)
        + activation_findings(run, scope, criteria, names),
        groups=groups,
        layer_norms=layer_norms,
        loss=loss,
        dropped_summaries=dropped(run, SUMMARIES).get(scope),
        dropped_histograms=dropped(run, HISTOGRAMS).get(scope),
        signals=signals,
        clip_note=clip_note(signals.clip_fraction, clip_steps, alerts),
        layer_names=names,
        alert_counts=counts,
    )


def analyze(runs: list[Run], criteria: HealthCriteria | None = None) -> list[RunReport]:
    """A report per tag scope per run; runs without keras_gradmon tags (e.g.
    Keras's validation curves) are left out."""
    return [
        analyze_run(run, scope, criteria, runs) for run in runs for scope in scopes(run)
    ]


def failing_count(reports: Sequence[Any], tier: str) -> int:
    """How many alert records are at `tier` or above (for `--fail-on`),
    counting those not kept whole too (`RunReport.counts`)."""
    rank = TIERS.index(tier)
    return sum(
        count
        for report in reports
        for name, count in report.counts.tiers.items()
        if name in TIERS and TIERS.index(name) >= rank
    )


def failing_alerts(reports: list[RunReport], tier: str) -> list[dict]:
    """The alerts kept whole at `tier` or above (`failing_count` counts
    every one)."""
    rank = TIERS.index(tier)
    return [
        alert
        for report in reports
        for alert in report.alerts
        if alert.get("tier") in TIERS and TIERS.index(alert["tier"]) >= rank
    ]
