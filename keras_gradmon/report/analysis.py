"""What a run's numbers say: norm summary, clipping, alerts, unhealthy layers.

Pure NumPy over a `Run`; the thresholds are the report's defaults, each a
field of `HealthCriteria`.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from keras_gradmon import defaults
from keras_gradmon.alerts import CRITICAL, TIERS
from keras_gradmon.report.events import Run
from keras_gradmon.report.findings import (
    Finding,
    activation_findings,
    gradient_findings,
    last,
    layer_of,
    prefix,
    subjects,
)
from keras_gradmon.report.losses import FinalLoss, final_loss
from keras_gradmon.report.signals import UPDATE_RATIO_BAND, Signals, run_signals
from keras_gradmon.report.timeline import Timeline, alert_timeline
from keras_gradmon.rl.tags import is_rl_alert_scope
from keras_gradmon.tags import monitor_scopes, variable_statistic

#: The tags of steps lost to the monitor's history buffer (`summary_history`):
#: `dropped/<kind>`, `dropped/<scope>/<kind>` (see `keras_gradmon.tags`),
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
    is the share of steps clipped (`signals.clip_share`); `signals` holds
    issue 21's signals (update ratio, spikes, noise scale, ...).
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

    @property
    def title(self) -> str:
        return f"{self.run} [{self.scope}]" if self.scope else self.run

    def alert_count(self, tier: str) -> int:
        return sum(1 for a in self.alerts if a.get("tier") == tier)

    @functools.cached_property
    def timeline(self) -> Timeline:
        """The alerts grouped into incidents (`alert_timeline`)."""
        return alert_timeline(self.alerts)


def scopes(run: Run) -> list[str | None]:
    """The tag scopes in `run` (None: unscoped): of the monitored optimizers
    (`grad_norm/<scope>/global`), of activation monitors and of alerts."""
    found = monitor_scopes(run.scalars)
    for tag in run.scalars:
        if tag.startswith("activation_std/"):
            subject = tag[len("activation_std/") :]
            found.add(subject.rsplit("/", 1)[0] if "/" in subject else None)
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


def _norm_summary(steps: np.ndarray, values: np.ndarray) -> NormSummary | None:
    finite = np.isfinite(values)
    if not finite.any():
        return None
    v, s = values[finite], steps[finite]
    peak = int(np.argmax(v))
    return NormSummary(
        median=float(np.median(v)),
        p99=float(np.percentile(v, 99)),
        max=float(v[peak]),
        peak_step=int(s[peak]),
        summaries=len(values),
        first_step=int(steps[0]),
        last_step=int(steps[-1]),
    )


def analyze_run(
    run: Run, scope: str | None = None, criteria: HealthCriteria | None = None
) -> RunReport:
    """The report of the optimizer with tag scope `scope` in `run`."""
    criteria = criteria or HealthCriteria()
    steps, values = run.series(prefix("grad_norm", scope) + "global")
    variables, group_names = _variables(run, scope)
    layer_norms = _layer_norms(run, variables, scope)
    groups = {"global": (steps, values)}
    for group in group_names:
        groups[group] = run.series(prefix("grad_norm", scope) + group)
    signals = run_signals(run, scope, group_names, criteria.update_ratio_band)
    skipped = last(run, prefix("skipped", scope) + "steps")
    nonfinite = run.series(prefix("grad_nonfinite", scope) + "global")[1]
    loss = final_loss(run)
    return RunReport(
        run=run.name,
        scope=scope,
        norm=_norm_summary(steps, values) if steps.size else None,
        clip_fraction=signals.clip_fraction,
        skipped_steps=int(skipped[1]) if skipped else None,
        nonfinite_summaries=int(np.sum(np.nan_to_num(nonfinite, nan=1.0) > 0)),
        final_loss=loss.value if loss else None,
        alerts=[a for a in run.alerts if a.get("scope") == scope],
        findings=gradient_findings(run, layer_norms, variables, scope, criteria)
        + activation_findings(run, scope, criteria),
        groups=groups,
        layer_norms=layer_norms,
        loss=loss,
        dropped_summaries=dropped(run, SUMMARIES).get(scope),
        dropped_histograms=dropped(run, HISTOGRAMS).get(scope),
        signals=signals,
    )


def analyze(runs: list[Run], criteria: HealthCriteria | None = None) -> list[RunReport]:
    """A report per tag scope per run; runs without keras_gradmon tags (e.g.
    Keras's validation curves) are left out."""
    return [analyze_run(run, scope, criteria) for run in runs for scope in scopes(run)]


def failing_alerts(reports: list[RunReport], tier: str) -> list[dict]:
    """The alerts at `tier` or above (for `--fail-on`)."""
    rank = TIERS.index(tier)
    return [
        alert
        for report in reports
        for alert in report.alerts
        if alert.get("tier") in TIERS and TIERS.index(alert["tier"]) >= rank
    ]


__all__ = [
    "CRITICAL",
    "Finding",
    "HealthCriteria",
    "NormSummary",
    "RunReport",
    "analyze",
    "analyze_run",
    "failing_alerts",
]
