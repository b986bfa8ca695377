"""The report's PNG plots (matplotlib, no display needed)."""

from __future__ import annotations

from typing import Any

import numpy as np

from keras_gradmon.alerts.incidents import Incident, Key, incident_key
from keras_gradmon.report.analysis import RunReport
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
