"""The report as text and as one self-contained HTML page: the run tables,
the signals, the RL section and the alert timeline; and its PNG plots.

Issue 21's signals as report text: a line per signal a run wrote, and the
table of the groups of seeds (`--group`).

The RL section as console text and HTML: a table per run, details, and
the groups of seeds (`--group`).

The report as one self-contained HTML page: tables, alerts and the plots
inline (no external files, no scripts).
"""

from __future__ import annotations

import base64
import dataclasses
import html
import os
import re
from collections.abc import Callable
from typing import Any

from keras_gradmon.alerts.events import CRITICAL, WARNING
from keras_gradmon.formatting import format_number
from keras_gradmon.report.analysis import (
    COLUMNS,
    FAR_ABOVE,
    FAR_BELOW,
    NO_LOSS,
    RunReport,
    SignalGroup,
    Signals,
    Spread,
)
from keras_gradmon.report.plots import (
    plot_groups,
    plot_layer_heatmap,
    plot_norms,
    plot_rl,
)
from keras_gradmon.report.records import FileDamage
from keras_gradmon.report.rl import EVAL_RETURN, GroupSummary, RLReport
from keras_gradmon.report.timeline import Timeline, timeline_rows

SIGNAL_GROUPS_CAPTION = (
    "Signals across seeds: the median over the runs that wrote each (their "
    "count in brackets). Update ratio: each run's median of update_ratio/"
    "global; max spike: each run's largest global norm between summaries; "
    "clipped: each run's share of steps clipped; batch_ratio and b_simple: "
    "each run's last value."
)

FAR_BELOW_TEXT = "the batch is far below B_simple"
FAR_ABOVE_TEXT = "the batch is far above B_simple"


def _spread(spread: Spread) -> str:
    return (
        f"median {format_number(spread.median)}, range "
        f"{format_number(spread.low)} to {format_number(spread.high)}, last "
        f"{format_number(spread.last)}"
    )


def _ratio_line(subject: str, spread: Spread, band: tuple[float, float]) -> str:
    where = (
        "inside the healthy band"
        if not spread.outside
        else f"outside the healthy band at {spread.outside} of "
        f"{spread.summaries} summaries"
    )
    return (
        f"update/weight ratio {subject}: {_spread(spread)}: {where} "
        f"({band[0]:g} to {band[1]:g}; about 1e-3 is typical)"
    )


def batch_verdict(ratio: float) -> str:
    """What `noise_scale/batch_ratio` (B_simple / batch) says.

    Example:

    >>> batch_verdict(40.0)
    'the batch is far below B_simple: a larger batch would train in fewer steps'
    """
    if ratio > FAR_BELOW:
        return f"{FAR_BELOW_TEXT}: a larger batch would train in fewer steps"
    if ratio < FAR_ABOVE:
        return f"{FAR_ABOVE_TEXT}: a smaller one would waste less compute"
    return "the batch is near B_simple"


def signal_lines(signals: Signals) -> list[str]:
    """A line per signal present in a run (the share of steps clipped is
    the report's "clipping" line).

    Example:

    >>> signal_lines(Signals(update_ratio={}, skipped_spikes=2))
    ['skipped spiking steps: 2']
    """
    lines = [
        _ratio_line(subject, spread, signals.band)
        for subject, spread in signals.update_ratio.items()
    ]
    if signals.spike is not None:
        norm, step = signals.spike
        lines.append(
            f"spikes between summaries: largest global norm "
            f"{format_number(norm)} at step {step}"
        )
    if signals.skipped_spikes is not None:
        lines.append(f"skipped spiking steps: {signals.skipped_spikes}")
    if signals.batch_ratio is not None:
        lines.append(
            f"gradient noise scale: batch_ratio {_spread(signals.batch_ratio)} "
            f"({batch_verdict(signals.batch_ratio.last)})"
        )
    if signals.b_simple is not None:
        lines.append(f"B_simple (examples): {_spread(signals.b_simple)}")
    return lines


def _group_cell(title: str, value: tuple[float, int] | None) -> str:
    if value is None:
        return "-"
    median, runs = value
    shown = f"{median:.0%}" if title == "clipped" else format_number(median)
    return f"{shown} ({runs})"


def signal_group_rows(groups: list[SignalGroup]) -> list[list[str]]:
    """The groups' table: a header, then one row per group; a column per
    signal some group has."""
    titles = [t for t, _ in COLUMNS if any(t in g.values for g in groups)]
    rows = [["group", "runs", *titles]]
    for g in groups:
        cells = [_group_cell(t, g.values.get(t)) for t in titles]
        rows.append([g.key, str(len(g.runs)), *cells])
    return rows


def _value(report: RLReport, name: str) -> float | None:
    last = report.last(name)
    return None if last is None else last[1]


def _cell(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:.0%}" if percent else format_number(value)


def rl_rows(reports: list[RLReport]) -> list[list[str]]:
    """The RL table: a header, then one row per monitored agent."""
    rows = [
        [
            "run",
            "final return",
            "min / max",
            "episodes",
            "solved",
            "value/return",
            "entropy",
            "intensity",
            "env steps/s",
            "alerts W/C",
        ]
    ]
    for r in reports:
        low, high = _value(r, "episode/return_min"), _value(r, "episode/return_max")
        rows.append(
            [
                r.title,
                _cell(r.final_return),
                "-" if low is None else f"{_cell(low)} / {_cell(high)}",
                _cell(_value(r, "episode/count")),
                _cell(_value(r, "episode/solve_rate"), percent=True),
                _cell(_value(r, "value/overestimation")),
                _cell(_value(r, "policy/entropy_fraction"), percent=True),
                _cell(_value(r, "progress/training_intensity")),
                _cell(_value(r, "progress/env_steps_per_sec")),
                f"{r.alert_count(WARNING)}/{r.alert_count(CRITICAL)}",
            ]
        )
    return rows


#: The detail lines: a label, then (signal, words) pairs shown when present.
_DETAILS = (
    (
        "return of the last episodes",
        (
            ("episode/return_mean", "mean"),
            ("episode/return_median", "median"),
            ("episode/return_min", "min"),
            ("episode/return_max", "max"),
            ("episode/return_std", "std"),
        ),
    ),
    (
        "evaluation",
        (
            ("eval/return_mean", "mean return"),
            ("eval/return_min", "min"),
            ("eval/return_max", "max"),
            ("eval/episodes", "episodes"),
        ),
    ),
    (
        "episodes",
        (
            ("episode/count", "count"),
            ("episode/length_mean", "mean length"),
            ("episode/length_max", "max length"),
            ("episode/solve_rate", "solve rate"),
        ),
    ),
    (
        "value at the start states",
        (
            ("value/start_estimate", "estimate"),
            ("value/start_return", "realized discounted return"),
            ("value/overestimation", "ratio"),
        ),
    ),
    (
        "policy",
        (
            ("policy/entropy_fraction", "entropy / max"),
            ("policy/entropy", "entropy (nats)"),
            ("policy/kl", "KL"),
            ("policy/approx_kl", "approx KL"),
            ("policy/clip_fraction", "clip fraction"),
            ("policy/explained_variance", "explained variance"),
        ),
    ),
    (
        "progress",
        (
            ("progress/env_steps", "env steps"),
            ("progress/train_steps", "train steps"),
            ("progress/training_intensity", "training intensity"),
            ("progress/env_steps_per_sec", "env steps/s"),
            ("progress/updates_per_sec", "updates/s"),
        ),
    ),
)


def rl_details(report: RLReport) -> list[str]:
    """The last value of each RL signal, a line per kind."""
    final = report.last("episode/return_mean")
    lines = [] if final is None else [f"last summary with episodes: step {final[0]}"]
    for label, names in _DETAILS:
        parts = [
            f"{words} {format_number(value)}"
            for name, words in names
            if (value := _value(report, name)) is not None
        ]
        if parts:
            lines.append(f"{label}: " + ", ".join(parts))
    return lines


def rl_text(report: RLReport, max_alerts: int = 20) -> str:
    """One agent's RL details and alerts, for the console."""
    lines = [f"== {report.title} ==", *rl_details(report)]
    lines += alert_list(report, max_alerts, lambda a: a.get("message", a.get("rule")))
    return "\n".join(lines)


def alert_list(report: Any, max_alerts: int, line: Callable[[dict], str]) -> list[str]:
    """The console's list of a report's alerts: their exact number (`report.
    counts`), the first `max_alerts` kept, and how many more and how many
    of them were not kept (`alert_store.AlertStore`)."""
    counts = report.counts
    if not counts.total:
        return ["alerts: none"]
    shown = report.alerts[:max_alerts]
    lines = [f"alerts ({counts.total:,}):", *(f"  {line(a)}" for a in shown)]
    more = counts.total - len(shown)
    if more > 0:
        lines.append(f"  ... and {more:,} more (see the HTML)")
    if counts.not_kept:
        lines.append(
            f"  ({counts.not_kept:,} alert record(s) not kept whole; the counts "
            "and the timeline include them)"
        )
    return lines


def _interval(ci: tuple[float, float]) -> str:
    return f"[{format_number(ci[0])}, {format_number(ci[1])}]"


def group_rows(groups: list[GroupSummary]) -> list[list[str]]:
    """The groups table: final return across seeds."""
    rows = [
        ["group", "return", "seeds", "median", "95% CI", "IQM", "95% CI", "min", "max"]
    ]
    for g in groups:
        rows.append(
            [
                g.key,
                "eval" if g.source == EVAL_RETURN else "collect",
                str(len(g.runs)),
                format_number(g.median),
                _interval(g.median_ci),
                format_number(g.iqm),
                _interval(g.iqm_ci),
                format_number(g.low),
                format_number(g.high),
            ]
        )
    return rows


def group_notes(groups: list[GroupSummary]) -> list[str]:
    """Members of each group, and those without episode statistics."""
    notes = []
    for g in groups:
        notes.append(f"{g.key}: {', '.join(g.runs)}")
        if g.missing:
            notes.append(f"  without episode statistics: {', '.join(g.missing)}")
    return notes


GROUPS_CAPTION = (
    "Final return: the mean return of the last collect episodes at each run's "
    "last summary (collect), or of its last evaluation when every seed "
    "recorded evaluations (eval). IQM: mean of the middle half of the seeds. "
    "95% CI: stratified bootstrap (2000 resamples, percentile)."
)


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
        unread: A sentence per kind of value the reader could not read
            (`Run.unread_notes`).
    """

    reports: list[RunReport]
    rl: list[RLReport] = dataclasses.field(default_factory=list)
    groups: list[GroupSummary] = dataclasses.field(default_factory=list)
    damaged: list[FileDamage] = dataclasses.field(default_factory=list)
    signal_groups: list[SignalGroup] = dataclasses.field(default_factory=list)
    unread: list[str] = dataclasses.field(default_factory=list)

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
        note = f" ({report.clip_note})" if report.clip_note else ""
        lines.append(f"clipping: {report.clip_fraction:.0%} of steps clipped{note}")
    if report.skipped_steps is not None:
        lines.append(f"skipped steps: {report.skipped_steps} (any reason)")
    if report.signals is not None:
        lines += signal_lines(report.signals)
    if report.loss is not None:
        lines.append(report.loss.description)
    elif report.final_loss is not None:
        lines.append(f"final loss: {format_number(report.final_loss)}")
    elif report.norm is not None:
        lines.append(NO_LOSS)
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
    lines += alert_list(report, max_alerts, alert_line)
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
    for note in contents.unread:
        parts += ["", f"WARNING: {note}"]
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


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}
th{background:#f3f3f3}.warning{color:#a86b00}.critical{color:#c00;font-weight:bold}
img{max-width:100%;display:block;margin:0.5em 0}
"""


def _table(rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
        for row in rows[1:]
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _image(path: str) -> str:
    with open(path, "rb") as file:
        data = base64.b64encode(file.read()).decode("ascii")
    alt = html.escape(os.path.basename(path))
    return f'<img alt="{alt}" src="data:image/png;base64,{data}">'


def _lines(lines: list[str]) -> str:
    return "<p>" + "<br>".join(html.escape(line) for line in lines) + "</p>"


def _alerts(report: Any) -> list[str]:
    counts = report.counts
    if not counts.total:
        return []
    parts = [f"<h3>Alerts ({counts.total:,})</h3>"]
    if counts.not_kept:
        parts.append(
            f"<p>{counts.not_kept:,} alert record(s) not kept whole are left out "
            "of this list (the first of each rule, subject and tier are "
            "listed); the counts and the timeline include them.</p>"
        )
    parts.append("<ul>")
    for alert in report.alerts:
        tier = html.escape(str(alert.get("tier", "")))
        parts.append(f"<li class='{tier}'>{html.escape(alert_line(alert))}</li>")
    return [*parts, "</ul>"]


def _timeline(timeline: Timeline) -> list[str]:
    if not timeline.incidents:
        return []
    return [
        f"<h3>Alert timeline</h3><p>{html.escape(timeline.caption)}</p>",
        _table(timeline_rows(timeline.incidents)),
    ]


def _gradient_section(report: RunReport, plots: dict[str, list[str]]) -> list[str]:
    parts = [f"<h2>{html.escape(report.title)}</h2>", _lines(run_details(report))]
    parts += _alerts(report) + _timeline(report.timeline)
    if report.findings:
        rows = [["layer", "problem", "reason"]] + [
            [f.layer, f.kind, f.reason] for f in report.findings
        ]
        parts.append("<h3>Unhealthy layers</h3>" + _table(rows))
    return parts + [_image(path) for path in plots.get(report.title, [])]


def _rl_section(report: RLReport, plots: dict[str, list[str]]) -> list[str]:
    parts = [f"<h2>{html.escape(report.title)}</h2>", _lines(rl_details(report))]
    parts += _alerts(report) + _timeline(report.timeline)
    return parts + [_image(path) for path in plots.get(report.title, [])]


def _summaries(contents: Contents, plots: dict[str, list[str]]) -> list[str]:
    parts = []
    for damage in contents.damaged:
        parts.append(f"<p class='critical'>{html.escape(damage.message)}</p>")
    for note in contents.unread:
        parts.append(f"<p class='critical'>{html.escape(note)}</p>")
    if contents.empty:
        return [*parts, f"<p>{html.escape(NO_DATA)}</p>"]
    if contents.reports:
        parts.append(_table(summary_rows(contents.reports)))
        parts += [
            f"<p class='warning'>{html.escape(warning)}</p>"
            for warning in dropped_warnings(contents.reports)
        ]
    if contents.rl:
        parts += ["<h2>RL training health</h2>", _table(rl_rows(contents.rl))]
    if contents.groups:
        parts += ["<h2>Across seeds</h2>", _table(group_rows(contents.groups))]
        parts.append(_lines([GROUPS_CAPTION, *group_notes(contents.groups)]))
        parts += [_image(path) for path in plots.get(GROUPS, [])]
    if contents.signal_groups:
        rows = signal_group_rows(contents.signal_groups)
        parts += ["<h2>Signals across seeds</h2>", _table(rows)]
        parts.append(_lines([SIGNAL_GROUPS_CAPTION]))
    return parts


def report_html(log_dir: str, contents: Contents, plots: dict[str, list[str]]) -> str:
    """A self-contained HTML page: tables, alerts and the plots inline."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>keras-gradmon report: {html.escape(log_dir)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>keras-gradmon report</h1><p>{html.escape(log_dir)}</p>",
        *_summaries(contents, plots),
    ]
    for report in contents.reports:
        parts += _gradient_section(report, plots)
    for rl in contents.rl:
        parts += _rl_section(rl, plots)
    parts.append("</body></html>")
    return "\n".join(parts)
