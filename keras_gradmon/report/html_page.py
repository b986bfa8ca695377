"""The report as one self-contained HTML page: tables, alerts and the plots
inline (no external files, no scripts)."""

from __future__ import annotations

import base64
import html
import os

from keras_gradmon.report.analysis import RunReport
from keras_gradmon.report.render import (
    GROUPS,
    NO_DATA,
    Contents,
    alert_line,
    dropped_warnings,
    run_details,
    summary_rows,
)
from keras_gradmon.report.rl import RLReport
from keras_gradmon.report.rl_render import (
    GROUPS_CAPTION,
    group_notes,
    group_rows,
    rl_details,
    rl_rows,
)
from keras_gradmon.report.signals_render import (
    SIGNAL_GROUPS_CAPTION,
    signal_group_rows,
)
from keras_gradmon.report.timeline import Timeline, timeline_rows

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


def _alerts(alerts: list[dict]) -> list[str]:
    if not alerts:
        return []
    parts = [f"<h3>Alerts ({len(alerts)})</h3><ul>"]
    for alert in alerts:
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
    parts += _alerts(report.alerts) + _timeline(report.timeline)
    if report.findings:
        rows = [["layer", "problem", "reason"]] + [
            [f.layer, f.kind, f.reason] for f in report.findings
        ]
        parts.append("<h3>Unhealthy layers</h3>" + _table(rows))
    return parts + [_image(path) for path in plots.get(report.title, [])]


def _rl_section(report: RLReport, plots: dict[str, list[str]]) -> list[str]:
    parts = [f"<h2>{html.escape(report.title)}</h2>", _lines(rl_details(report))]
    parts += _alerts(report.alerts) + _timeline(report.timeline)
    return parts + [_image(path) for path in plots.get(report.title, [])]


def _summaries(contents: Contents, plots: dict[str, list[str]]) -> list[str]:
    parts = []
    for damage in contents.damaged:
        parts.append(f"<p class='critical'>{html.escape(damage.message)}</p>")
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
