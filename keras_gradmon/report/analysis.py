"""What a run's numbers say: norm summary, clipping, alerts, unhealthy layers.

Pure NumPy over a `Run`; the thresholds are the report's defaults, each a
field of `HealthCriteria`.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from keras_gradmon.alerts import CRITICAL, TIERS
from keras_gradmon.alerts.events import format_number
from keras_gradmon.report.events import Run

_GLOBAL = re.compile(r"^grad_norm/(?:(?P<scope>.+)/)?global$")
# Per-variable statistics: a subject under one of these is a variable.
_PER_VARIABLE = (
    "grad_mean",
    "grad_std",
    "grad_min",
    "grad_max",
    "grad_max_abs",
    "grad_zero_fraction",
    "grad_to_weight",
    "grad_hist",
)


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
    """

    explosion_factor: float = 100.0
    vanishing_ratio: float = 1e-4
    dead_fraction: float = 0.25
    std_band: tuple[float, float] = (0.5, 2.0)
    saturated_fraction: float = 0.5


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
class Finding:
    """One unhealthy layer (or variable group), with a one-line reason."""

    layer: str
    kind: str  # "non-finite", "exploding", "vanishing", "dead units", ...
    reason: str


@dataclasses.dataclass(frozen=True)
class RunReport:
    """What the report says about one monitored optimizer in one run."""

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

    @property
    def title(self) -> str:
        return f"{self.run} [{self.scope}]" if self.scope else self.run

    def alert_count(self, tier: str) -> int:
        return sum(1 for a in self.alerts if a.get("tier") == tier)


def scopes(run: Run) -> list[str | None]:
    """The tag scopes in `run` (None: unscoped): of the monitored optimizers
    (`grad_norm/<scope>/global`), of activation monitors and of alerts."""
    found = set()
    for tag in run.scalars:
        match = _GLOBAL.match(tag)
        if match:
            found.add(match.group("scope"))
        elif tag.startswith("activation_std/"):
            subject = tag[len("activation_std/") :]
            found.add(subject.rsplit("/", 1)[0] if "/" in subject else None)
    found.update(alert.get("scope") for alert in run.alerts)
    return sorted(found, key=lambda s: (s is not None, s or ""))


def _prefix(statistic: str, scope: str | None) -> str:
    return f"{statistic}/{scope}/" if scope else f"{statistic}/"


def _subjects(run: Run, statistic: str, scope: str | None) -> list[str]:
    prefix = _prefix(statistic, scope)
    tags = list(run.scalars) + run.histogram_tags
    return sorted(
        {
            tag[len(prefix) :]
            for tag in tags
            if tag.startswith(prefix) and tag[len(prefix) :] != "global"
        }
    )


def _variables(run: Run, scope: str | None) -> tuple[list[str], list[str]]:
    """`(variable paths, group names)` with a `grad_norm` of their own."""
    per_variable = set()
    for statistic in _PER_VARIABLE:
        per_variable.update(_subjects(run, statistic, scope))
    others = {f"{s}/" for s in scopes(run) if s and s != scope}
    variables, groups = [], []
    for subject in _subjects(run, "grad_norm", scope):
        if scope is None and subject.startswith(tuple(others)):
            continue  # a scoped optimizer's tag
        is_variable = subject in per_variable or "/" in subject
        (variables if is_variable else groups).append(subject)
    return variables, groups


def layer_of(path: str) -> str:
    """The layer of a variable path: everything before the last segment."""
    return path.rsplit("/", 1)[0] if "/" in path else path


def _layer_norms(
    run: Run, variables: list[str], scope: str | None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each layer's gradient norm per step: sqrt of the sum of its variables'
    squared norms, at the steps where all of them were recorded."""
    layers: dict[str, list[str]] = {}
    for path in variables:
        layers.setdefault(layer_of(path), []).append(path)
    out = {}
    prefix = _prefix("grad_norm", scope)
    for layer, paths in layers.items():
        series = [run.scalars.get(prefix + p, {}) for p in paths]
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


def _quarter(values: np.ndarray, last: bool) -> np.ndarray:
    k = max(1, len(values) // 4)
    return values[-k:] if last else values[:k]


def _gradient_findings(
    run: Run,
    layer_norms: dict[str, tuple[np.ndarray, np.ndarray]],
    variables: list[str],
    scope: str | None,
    criteria: HealthCriteria,
) -> list[Finding]:
    findings = []
    nonfinite_prefix = _prefix("grad_nonfinite", scope)
    bad_layers: dict[str, list[int]] = {}
    for path in variables:
        steps, counts = run.series(nonfinite_prefix + path)
        bad = steps[np.nan_to_num(counts, nan=1.0) > 0]
        if bad.size:
            bad_layers.setdefault(layer_of(path), []).extend(bad.tolist())
    for layer, steps in sorted(bad_layers.items()):
        findings.append(
            Finding(
                layer,
                "non-finite",
                f"NaN/Inf gradients at {len(set(steps))} summaries, first at step "
                f"{min(steps)}",
            )
        )
    late = {
        layer: float(np.median(_quarter(v[np.isfinite(v)], last=True)))
        for layer, (_, v) in layer_norms.items()
        if np.isfinite(v).any()
    }
    typical = float(np.median(list(late.values()))) if late else 0.0
    for layer, (steps, values) in sorted(layer_norms.items()):
        finite = np.isfinite(values)
        if finite.sum() < 2 or layer in bad_layers:
            continue
        v, s = values[finite], steps[finite]
        early = float(np.median(_quarter(v, last=False)))
        peak = int(np.argmax(v))
        if early > 0 and v[peak] >= criteria.explosion_factor * early:
            findings.append(
                Finding(
                    layer,
                    "exploding",
                    f"gradient norm grew {format_number(v[peak] / early)}x, from "
                    f"{format_number(early)} early on to {format_number(v[peak])} "
                    f"at step {int(s[peak])}",
                )
            )
        elif typical > 0 and late[layer] < criteria.vanishing_ratio * typical:
            findings.append(
                Finding(
                    layer,
                    "vanishing",
                    f"gradient norm {format_number(late[layer])} late in the run, "
                    f"{format_number(late[layer] / typical)} of the median layer's "
                    f"{format_number(typical)}",
                )
            )
    return findings


def _last(run: Run, tag: str) -> tuple[int, float] | None:
    steps, values = run.series(tag)
    return (int(steps[-1]), float(values[-1])) if steps.size else None


def _activation_findings(
    run: Run, scope: str | None, criteria: HealthCriteria
) -> list[Finding]:
    findings = []
    low, high = criteria.std_band
    for layer in _subjects(run, "activation_std", scope):
        if "/" in layer:
            continue  # a scoped monitor's layer
        get = lambda stat, layer=layer: _last(  # noqa: E731
            run, _prefix(f"activation_{stat}", scope) + layer
        )
        dead, std = get("dead_fraction"), get("std")
        saturated, low_value, high_value = (
            get("saturated_fraction"),
            get("min"),
            get("max"),
        )
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
                    f"{saturated[1]:.0%} of its outputs saturated at step "
                    f"{saturated[0]}",
                )
            )
    return findings


def analyze_run(
    run: Run, scope: str | None = None, criteria: HealthCriteria | None = None
) -> RunReport:
    """The report of the optimizer with tag scope `scope` in `run`."""
    criteria = criteria or HealthCriteria()
    steps, values = run.series(_prefix("grad_norm", scope) + "global")
    variables, group_names = _variables(run, scope)
    layer_norms = _layer_norms(run, variables, scope)
    groups = {"global": (steps, values)}
    for group in group_names:
        groups[group] = run.series(_prefix("grad_norm", scope) + group)
    clip = run.series(_prefix("clip", scope) + "fraction")[1]
    skipped = _last(run, _prefix("skipped", scope) + "steps")
    nonfinite = run.series(_prefix("grad_nonfinite", scope) + "global")[1]
    loss = _last(run, "epoch_loss") or _last(run, "loss")
    return RunReport(
        run=run.name,
        scope=scope,
        norm=_norm_summary(steps, values) if steps.size else None,
        clip_fraction=float(np.nanmean(clip)) if clip.size else None,
        skipped_steps=int(skipped[1]) if skipped else None,
        nonfinite_summaries=int(np.sum(np.nan_to_num(nonfinite, nan=1.0) > 0)),
        final_loss=loss[1] if loss else None,
        alerts=[a for a in run.alerts if a.get("scope") == scope],
        findings=_gradient_findings(run, layer_norms, variables, scope, criteria)
        + _activation_findings(run, scope, criteria),
        groups=groups,
        layer_norms=layer_norms,
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
