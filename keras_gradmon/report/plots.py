"""The report's PNG plots (matplotlib, no display needed): the norms, the
layer heatmap, the alert timeline, and the RL section's figures.

The report's PNG plots (matplotlib, no display needed).

The RL section's PNG plots: one figure per run, one for the groups.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from keras_gradmon.alerts.incidents import Incident, Key, incident_key
from keras_gradmon.report.analysis import RunReport
from keras_gradmon.report.rl import (
    EVAL_RETURN,
    FINAL_RETURN,
    GroupSummary,
    RLReport,
)
from keras_gradmon.report.timeline import Timeline

_TIER_COLORS = {"warning": "#e69f00", "critical": "#d62728"}
#: Lanes of the alert timeline drawn at most (the rest: in the tables).
MAX_LANES = 12
_LANE_INCHES = 0.28


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def _draw_norms(axes: Any, report: RunReport) -> None:
    """Global and group gradient norms (log scale), dashed lines at alerts."""
    for name, (steps, values) in report.groups.items():
        shown = np.where(np.isfinite(values) & (values > 0), values, np.nan)
        if np.isfinite(shown).any():
            axes.plot(steps, shown, label=name, lw=2 if name == "global" else 1)
    labelled = set()
    for alert in report.alerts:
        tier = alert.get("tier", "warning")
        axes.axvline(
            int(alert.get("step", 0)),
            color=_TIER_COLORS.get(tier, "gray"),
            ls="--",
            lw=0.8,
            alpha=0.7,
            label=f"{tier} alert" if tier not in labelled else None,
        )
        labelled.add(tier)
    axes.set_yscale("log")
    axes.set_ylabel("gradient L2 norm")
    axes.set_title(f"Gradient norms: {report.title}")
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=8, loc="best")
    axes.grid(alpha=0.3)


def timeline_lanes(timeline: Timeline) -> dict[Key, list[Incident]]:
    """The incidents of each (rule, subject, tier), in order of first step:
    the lanes of `draw_timeline`.

    Example:

    >>> from keras_gradmon.report.timeline import alert_timeline
    >>> alerts = [{"rule": "spike", "tier": "warning", "step": step,
    ...            "value": 9.0, "threshold": 4.0, "subject": "global"}
    ...           for step in (3, 4, 200)]
    >>> {key: len(v) for key, v in timeline_lanes(alert_timeline(alerts)).items()}
    {('spike', 'global', 'warning'): 2}
    """
    lanes: dict[Key, list[Incident]] = {}
    for incident in timeline.incidents:
        lanes.setdefault(incident_key(incident.first), []).append(incident)
    return lanes


def _lane_label(key: Key) -> str:
    rule, subject, _ = key
    subject = subject if len(subject) <= 28 else "..." + subject[-25:]
    return f"{rule}: {subject}"


def _least_width(axes: Any, incidents: list[Incident]) -> float:
    """Width of a one-step bar: 0.4% of the steps on the axis (at least half
    a step), so that it shows on a long run."""
    low, high = axes.get_xlim()
    low = min(low, *(i.first.step for i in incidents))
    high = max(high, *(i.last.step for i in incidents))
    return max((high - low) * 0.004, 0.5)


def draw_timeline(
    axes: Any, timeline: Timeline, lanes: dict[Key, list[Incident]]
) -> None:
    """A lane per (rule, subject, tier), the first `MAX_LANES`: a bar from
    first to last step per incident, coloured by tier, labelled with its
    count of alerts. The title says how many lanes are left out.

    Example (`plot_norms` draws it under the norms, on the same step axis):

    >>> figure, axes = pyplot().subplots()  # doctest: +SKIP
    >>> lanes = timeline_lanes(report.timeline)  # doctest: +SKIP
    >>> draw_timeline(axes, report.timeline, lanes)  # doctest: +SKIP
    """
    shown = list(lanes.items())[:MAX_LANES]
    least = _least_width(axes, [i for _, incidents in shown for i in incidents])
    for lane, (key, incidents) in enumerate(shown):
        for incident in incidents:
            first, last = incident.first.step, incident.last.step
            start, width = first, last - first
            if width < least:
                start, width = (first + last - least) / 2, least
            bar = [(start, width)]
            color = _TIER_COLORS.get(key[2], "gray")
            axes.broken_barh(bar, (lane - 0.35, 0.7), color=color)
            label = f" {incident.count}"
            axes.text(start + width, lane, label, va="center", fontsize=7)
    labels = [_lane_label(key) for key, _ in shown]
    axes.set_yticks(range(len(shown)), labels, fontsize=7)
    axes.set_ylim(len(shown) - 0.5, -0.5)
    title = f"Alert timeline: {timeline.caption}"
    if len(lanes) > len(shown):
        title += f"; {len(lanes) - len(shown)} more lane(s) in the table"
    axes.set_title(title, fontsize=8)
    axes.set_xlabel("step")
    axes.set_axisbelow(True)  # the grid under the bars
    axes.grid(alpha=0.3, axis="x")


def timeline_height(lanes: dict[Key, list[Incident]]) -> float:
    """Inches of the timeline axes for `lanes` (at most `MAX_LANES`).

    Example:

    >>> round(timeline_height({("spike", "global", "warning"): []}), 2)
    1.08
    """
    return 0.8 + _LANE_INCHES * min(len(lanes), MAX_LANES)


def plot_norms(report: RunReport, path: str) -> None:
    """Global and group gradient norms over steps (log scale), alert markers,
    and under them, on the same step axis, the alert timeline
    (`draw_timeline`) when the run has alerts."""
    plt = pyplot()
    lanes = timeline_lanes(report.timeline)
    if not lanes:
        figure, axes = plt.subplots(figsize=(8, 4), dpi=100)
        _draw_norms(axes, report)
        axes.set_xlabel("step")
    else:
        height = timeline_height(lanes)
        figure, (axes, below) = plt.subplots(
            2,
            1,
            sharex=True,
            figsize=(8, 4 + height),
            dpi=100,
            gridspec_kw={"height_ratios": [4, height]},
        )
        _draw_norms(axes, report)
        draw_timeline(below, report.timeline, lanes)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_layer_heatmap(report: RunReport, path: str) -> bool:
    """log10 gradient norm per layer (rows) and summary step (columns).

    Returns:
        False (and writes nothing) when the run has no per-layer norms.
    """
    layers = [k for k, (s, _) in report.layer_norms.items() if s.size]
    if not layers:
        return False
    steps = sorted({int(s) for k in layers for s in report.layer_norms[k][0]})
    column = {step: i for i, step in enumerate(steps)}
    grid = np.full((len(layers), len(steps)), np.nan)
    for row, layer in enumerate(layers):
        for step, value in zip(*report.layer_norms[layer]):
            if np.isfinite(value) and value > 0:
                grid[row, column[int(step)]] = np.log10(value)
    plt = pyplot()
    height = 1.5 + 0.35 * len(layers)
    figure, axes = plt.subplots(figsize=(8, height), dpi=100)
    image = axes.imshow(
        np.ma.masked_invalid(grid),
        aspect="auto",
        interpolation="nearest",
        cmap="viridis",
    )
    axes.set_yticks(range(len(layers)), layers, fontsize=8)
    ticks = np.linspace(0, len(steps) - 1, min(len(steps), 8)).astype(int)
    axes.set_xticks(ticks, [str(steps[i]) for i in ticks], fontsize=8)
    axes.set_xlabel("step")
    axes.set_title(f"log10 gradient norm per layer: {report.title}")
    figure.colorbar(image, ax=axes, label="log10 norm")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


# (signals, y label, reference line, y limits) of the panels after the
# return curve; the first signal present is drawn.
_PANELS = (
    (("policy/entropy_fraction",), "entropy / max", None, (0.0, 1.05)),
    (("policy/entropy",), "entropy (nats)", None, None),
    (("value/overestimation",), "value / return", 1.0, None),
    (("progress/training_intensity",), "training intensity", 1.0, None),
    (("progress/env_steps_per_sec",), "env steps / s", None, None),
)


def _alerts(axes: object, report: RLReport) -> None:
    for alert in report.alerts:
        tier = alert.get("tier", "warning")
        axes.axvline(
            int(alert.get("step", 0)),
            color=_TIER_COLORS.get(tier, "gray"),
            ls="--",
            lw=0.8,
            alpha=0.7,
        )


def _return_panel(axes: object, report: RLReport) -> None:
    steps, mean = report.series.get(FINAL_RETURN, (np.zeros(0), np.zeros(0)))
    if steps.size:
        low = report.series.get("episode/return_min", (steps, mean))[1]
        high = report.series.get("episode/return_max", (steps, mean))[1]
        if low.shape == mean.shape and high.shape == mean.shape:
            axes.fill_between(steps, low, high, alpha=0.2, label="min-max")
        axes.plot(steps, mean, lw=2, label="mean")
    steps, evaluated = report.series.get("eval/return_mean", (np.zeros(0),) * 2)
    if steps.size:
        axes.plot(steps, evaluated, "o", ms=4, color="black", label="evaluation")
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=7, loc="best")
    axes.set_ylabel("episode return")
    _alerts(axes, report)


def _panels(report: RLReport) -> list[tuple]:
    """The panels with data: entropy as a fraction when it has a maximum."""
    shown = [p for p in _PANELS if p[0][0] in report.series]
    if any(p[0][0] == "policy/entropy_fraction" for p in shown):
        shown = [p for p in shown if p[0][0] != "policy/entropy"]
    return shown


def plot_rl(report: RLReport, path: str) -> None:
    """Return (mean, min-max band, evaluations), entropy, value/return,
    intensity and environment steps per second over train steps; alert
    markers."""
    panels_shown = _panels(report)
    plt = pyplot()
    figure, panels = plt.subplots(
        1 + len(panels_shown),
        1,
        figsize=(8, 2 + 2 * len(panels_shown)),
        dpi=100,
        sharex=True,
        squeeze=False,
    )
    panels = panels[:, 0]
    _return_panel(panels[0], report)
    for axes, (names, label, reference, limits) in zip(panels[1:], panels_shown):
        steps, values = report.series[names[0]]
        axes.plot(steps, values, lw=1.5)
        if reference is not None:
            axes.axhline(reference, color="gray", lw=0.8, ls=":")
        if limits is not None:
            axes.set_ylim(*limits)
        axes.ticklabel_format(axis="y", useOffset=False)
        axes.set_ylabel(label)
        _alerts(axes, report)
    for axes in panels:
        axes.grid(alpha=0.3)
    panels[-1].set_xlabel("train step")
    panels[0].set_title(f"RL training health: {report.title}")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_groups(groups: list[GroupSummary], path: str) -> None:
    """Each group's mean-return curve across seeds: median and IQM lines,
    min-max band."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=100)
    for group in groups:
        steps, mid, inter, low, high = group.curve
        if not steps.size:
            continue
        kind = "evaluation" if group.source == EVAL_RETURN else "collect"
        (line,) = axes.plot(steps, mid, lw=2, label=f"{group.key} median ({kind})")
        axes.plot(steps, inter, lw=1, ls="--", color=line.get_color(), label="IQM")
        axes.fill_between(steps, low, high, color=line.get_color(), alpha=0.15)
    axes.set_xlabel("train step")
    axes.set_ylabel("mean return")
    axes.set_title("Return across seeds (band: min-max)")
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=8, loc="best")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
