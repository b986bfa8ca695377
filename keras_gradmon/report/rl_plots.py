"""The RL section's PNG plots: one figure per run, one for the groups."""

from __future__ import annotations

import numpy as np

from keras_gradmon.report.plots import pyplot
from keras_gradmon.report.rl import (
    EVAL_RETURN,
    FINAL_RETURN,
    GroupSummary,
    RLReport,
)

_TIER_COLORS = {"warning": "#e69f00", "critical": "#d62728"}
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
