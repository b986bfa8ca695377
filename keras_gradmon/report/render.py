"""The report as console text, and its PNG plots."""

from __future__ import annotations

import dataclasses
import os
import re

from keras_gradmon.alerts import CRITICAL, WARNING
from keras_gradmon.alerts.events import format_number
from keras_gradmon.report.analysis import RunReport
from keras_gradmon.report.events import FileDamage
from keras_gradmon.report.plots import plot_layer_heatmap, plot_norms
from keras_gradmon.report.rl import GroupSummary, RLReport
from keras_gradmon.report.rl_plots import plot_groups, plot_rl
from keras_gradmon.report.rl_render import (
    GROUPS_CAPTION,
    group_notes,
    group_rows,
    rl_rows,
    rl_text,
)
from keras_gradmon.report.signals import SignalGroup
from keras_gradmon.report.signals_render import (
    SIGNAL_GROUPS_CAPTION,
    signal_group_rows,
    signal_lines,
)
from keras_gradmon.report.timeline import Timeline, timeline_rows

#: The `write_plots` key of the groups' figure.
GROUPS = "groups"
#: What to do about summaries lost to the history buffer.
DROPPED_HINT = "raise `summary_history`"
NO_DATA = (
    "No keras_gradmon data in these event files (no grad_norm/.../global, "
    "activation_* or rl/... tags)."
)


@dataclasses.dataclass
class Contents:
    """Everything the report shows.

    Attributes:
        reports: A gradient/activation report per monitored optimizer.
        rl: An RL report per monitored agent.
        groups: The groups of seeds (`--group`).
        damaged: The damaged event files.
        signal_groups: The signals of the groups of seeds (`--group`).
    """

    reports: list[RunReport]
    rl: list[RLReport] = dataclasses.field(default_factory=list)
    groups: list[GroupSummary] = dataclasses.field(default_factory=list)
    damaged: list[FileDamage] = dataclasses.field(default_factory=list)
    signal_groups: list[SignalGroup] = dataclasses.field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.reports or self.rl)


def _number(value: float | None) -> str:
    return "-" if value is None else format_number(value)


def _norm_cell(report: RunReport) -> tuple[str, str, str]:
    norm = report.norm
    if norm is None:
        return "-", "-", "-"
    peak = f"{format_number(norm.max)} @ {norm.peak_step}"
    return format_number(norm.median), format_number(norm.p99), peak


def summary_rows(reports: list[RunReport]) -> list[list[str]]:
    """The comparison table: a header, then one row per report."""
    rows = [
        [
            "run",
            "final loss",
            "median norm",
            "p99 norm",
            "max norm @ step",
            "clipped",
            "skipped",
            "alerts W/C",
            "unhealthy layers",
        ]
    ]
    for r in reports:
        rows.append(
            [
                r.title,
                _number(r.final_loss),
                *_norm_cell(r),
                "-" if r.clip_fraction is None else f"{r.clip_fraction:.0%}",
                "-" if r.skipped_steps is None else str(r.skipped_steps),
                f"{r.alert_count(WARNING)}/{r.alert_count(CRITICAL)}",
                str(len({f.layer for f in r.findings})),
            ]
        )
    return rows


def _dropped(report: RunReport) -> list[tuple[str, int]]:
    """`(kind, count)` of the steps the history buffer lost, if any."""
    counts = (
        ("summary", report.dropped_summaries),
        ("histogram", report.dropped_histograms),
    )
    return [(kind, count) for kind, count in counts if count]


def dropped_warnings(reports: list[RunReport]) -> list[str]:
    """A warning per report whose history buffer lost steps."""
    warnings = []
    for r in reports:
        lost = " and ".join(f"{n} {kind} step(s)" for kind, n in _dropped(r))
        if lost:
            warnings.append(f"WARNING: {r.title}: {lost} dropped ({DROPPED_HINT})")
    return warnings


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
        for row in rows
    )


def alert_line(alert: dict) -> str:
    return alert.get("message") or (
        f"{str(alert.get('tier', '')).upper()} {alert.get('rule')} at step "
        f"{alert.get('step')}: {alert.get('subject')}"
    )


def run_details(report: RunReport) -> list[str]:
    """One run's numbers: norm, clipping, skipped steps, signals, final loss
    and dropped steps, a line each."""
    lines = []
    norm = report.norm
    if norm is not None:
        lines.append(
            f"global gradient norm: median {format_number(norm.median)}, p99 "
            f"{format_number(norm.p99)}, max {format_number(norm.max)} at step "
            f"{norm.peak_step} ({norm.summaries} summaries, steps "
            f"{norm.first_step}-{norm.last_step})"
        )
    if report.nonfinite_summaries:
        lines.append(f"non-finite gradients at {report.nonfinite_summaries} summaries")
    if report.clip_fraction is not None:
        lines.append(f"clipping: {report.clip_fraction:.0%} of steps clipped")
    if report.skipped_steps is not None:
        lines.append(f"skipped steps: {report.skipped_steps} (any reason)")
    if report.signals is not None:
        lines += signal_lines(report.signals)
    if report.loss is not None:
        lines.append(report.loss.description)
    elif report.final_loss is not None:
        lines.append(f"final loss: {format_number(report.final_loss)}")
    for kind, count in _dropped(report):
        lines.append(
            f"dropped {kind} steps: {count} recorded {kind} step(s) were lost: "
            f"the history buffer overflowed between two host reads ({DROPPED_HINT})"
        )
    return lines


def timeline_lines(timeline: Timeline, max_incidents: int = 10) -> list[str]:
    """The "alert timeline" section: a table of the first `max_incidents`
    incidents, and a line counting the others (none without alerts).

    Example:

    >>> from keras_gradmon.report.timeline import alert_timeline
    >>> alert = {"rule": "spike", "tier": "warning", "step": 3, "value": 9.0,
    ...          "threshold": 4.0, "subject": "global"}
    >>> print("\\n".join(timeline_lines(alert_timeline([alert]))))
    alert timeline (1 incident(s) of 1 alert(s); an incident ends after 100 quiet steps):
      tier     rule   subject  first  last  count  worst
      warning  spike  global   3      3     1      grad_norm = 9 @ 3
    """  # noqa: E501
    if not timeline.incidents:
        return []
    rows = timeline_rows(timeline.incidents[:max_incidents])
    lines = [f"alert timeline ({timeline.caption}):"]
    lines += [f"  {line}" for line in table(rows).splitlines()]
    more = len(timeline.incidents) - max_incidents
    if more > 0:
        lines.append(f"  ... {more} more incident(s) (see the HTML)")
    return lines


def run_text(report: RunReport, max_alerts: int = 20) -> str:
    """One run's details, for the console."""
    lines = [f"== {report.title} ==", *run_details(report)]
    lines.append(f"alerts ({len(report.alerts)}):" if report.alerts else "alerts: none")
    for alert in report.alerts[:max_alerts]:
        lines.append(f"  {alert_line(alert)}")
    if len(report.alerts) > max_alerts:
        lines.append(f"  ... and {len(report.alerts) - max_alerts} more (see the HTML)")
    lines += timeline_lines(report.timeline)
    if report.findings:
        lines.append("unhealthy layers:")
        width = max(len(f.layer) for f in report.findings)
        kind_width = max(len(f.kind) for f in report.findings)
        for f in report.findings:
            lines.append(
                f"  {f.layer.ljust(width)}  {f.kind.ljust(kind_width)}  {f.reason}"
            )
    else:
        lines.append("unhealthy layers: none")
    return "\n".join(lines)


def report_text(log_dir: str, contents: Contents) -> str:
    """The whole console report."""
    parts = [f"keras-gradmon report: {log_dir}"]
    for damage in contents.damaged:
        parts += ["", f"WARNING: {damage.message}"]
    if contents.empty:
        return "\n".join([*parts, NO_DATA])
    if contents.reports:
        parts += ["", f"{len(contents.reports)} monitored optimizer(s):"]
        parts += ["", table(summary_rows(contents.reports))]
        warnings = dropped_warnings(contents.reports)
        parts += ["", *warnings] if warnings else []
    if contents.rl:
        parts += ["", f"RL training health ({len(contents.rl)} agent(s)):"]
        parts += ["", table(rl_rows(contents.rl))]
    if contents.groups:
        parts += ["", "Across seeds (--group):", "", table(group_rows(contents.groups))]
        parts += [GROUPS_CAPTION, *group_notes(contents.groups)]
    if contents.signal_groups:
        rows = signal_group_rows(contents.signal_groups)
        parts += ["", "Signals across seeds (--group):", "", table(rows)]
        parts.append(SIGNAL_GROUPS_CAPTION)
    for report in contents.reports:
        parts += ["", run_text(report)]
    for rl in contents.rl:
        parts += ["", rl_text(rl), *timeline_lines(rl.timeline)]
    return "\n".join(parts)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "run"


def write_plots(contents: Contents, out_dir: str) -> dict[str, list[str]]:
    """Writes the PNGs into `out_dir`; `{title: [paths]}` (the groups'
    figure under `GROUPS`)."""
    os.makedirs(out_dir, exist_ok=True)
    written: dict[str, list[str]] = {}
    for report in contents.reports:
        slug = _slug(report.title)
        norms = os.path.join(out_dir, f"{slug}_norms.png")
        plot_norms(report, norms)
        written[report.title] = [norms]
        heatmap = os.path.join(out_dir, f"{slug}_layers.png")
        if plot_layer_heatmap(report, heatmap):
            written[report.title].append(heatmap)
    for rl in contents.rl:
        path = os.path.join(out_dir, f"{_slug(rl.title)}.png")
        plot_rl(rl, path)
        written[rl.title] = [path]
    if contents.groups:
        path = os.path.join(out_dir, "rl_groups.png")
        plot_groups(contents.groups, path)
        written[GROUPS] = [path]
    return written
