"""The unhealthy layers of a run: gradient and activation findings.

Pure NumPy over a `Run`, with the thresholds of `HealthCriteria`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from keras_gradmon.alerts.events import format_number
from keras_gradmon.report.events import Run
from keras_gradmon.tags import tag

if TYPE_CHECKING:
    from keras_gradmon.report.analysis import HealthCriteria


@dataclasses.dataclass(frozen=True)
class Finding:
    """One unhealthy layer (or variable group), with a one-line reason."""

    layer: str
    kind: str  # "non-finite", "exploding", "vanishing", "dead units", ...
    reason: str


def prefix(statistic: str, scope: str | None) -> str:
    """The start of the tags of `statistic` under `scope` (the tag scheme of
    `keras_gradmon.tags`)."""
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
) -> dict[str, list[int]]:
    """The layers with NaN/Inf gradients, and the steps where they had them."""
    start = prefix("grad_nonfinite", scope)
    bad_layers: dict[str, list[int]] = {}
    for path in variables:
        steps, counts = run.series(start + path)
        bad = steps[np.nan_to_num(counts, nan=1.0) > 0]
        if bad.size:
            bad_layers.setdefault(layer_of(path), []).extend(bad.tolist())
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
            f"NaN/Inf gradients at {len(set(steps))} summaries, first at step "
            f"{min(steps)}",
        )
        for layer, steps in sorted(bad_layers.items())
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
    steps, values = run.series(tag)
    return (int(steps[-1]), float(values[-1])) if steps.size else None


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


def activation_findings(
    run: Run, scope: str | None, criteria: HealthCriteria
) -> list[Finding]:
    """The activation findings of every layer an `ActivationMonitor` measured."""
    findings = []
    for layer in subjects(run, "activation_std", scope):
        if "/" in layer:
            continue  # a scoped monitor's layer

        def get(stat: str, layer: str = layer) -> tuple[int, float] | None:
            return last(run, prefix(f"activation_{stat}", scope) + layer)

        findings += _layer_findings(layer, get, criteria)
    return findings
