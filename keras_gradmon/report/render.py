"""The report as console text, and as a self-contained HTML page."""

from __future__ import annotations

import base64
import html
import os
import re

from keras_gradmon.alerts import CRITICAL, WARNING
from keras_gradmon.alerts.events import format_number
from keras_gradmon.report.analysis import RunReport
from keras_gradmon.report.plots import plot_layer_heatmap, plot_norms


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


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
        for row in rows
    )


def _alert_line(alert: dict) -> str:
    return alert.get("message") or (
        f"{str(alert.get('tier', '')).upper()} {alert.get('rule')} at step "
        f"{alert.get('step')}: {alert.get('subject')}"
    )


def run_text(report: RunReport, max_alerts: int = 20) -> str:
    """One run's details, for the console."""
    lines = [f"== {report.title} =="]
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
        lines.append(f"skipped (non-finite) steps: {report.skipped_steps}")
    if report.final_loss is not None:
        lines.append(f"final loss: {format_number(report.final_loss)}")
    lines.append(f"alerts ({len(report.alerts)}):" if report.alerts else "alerts: none")
    for alert in report.alerts[:max_alerts]:
        lines.append(f"  {_alert_line(alert)}")
    if len(report.alerts) > max_alerts:
        lines.append(f"  ... and {len(report.alerts) - max_alerts} more (see the HTML)")
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


def report_text(log_dir: str, reports: list[RunReport]) -> str:
    """The whole console report."""
    if not reports:
        return (
            f"keras-gradmon report: {log_dir}\nNo keras_gradmon data in these "
            "event files (no grad_norm/.../global or activation_* tags)."
        )
    parts = [
        f"keras-gradmon report: {log_dir} ({len(reports)} monitored runs)",
        "",
        _table(summary_rows(reports)),
    ]
    for report in reports:
        parts += ["", run_text(report)]
    return "\n".join(parts)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "run"


def write_plots(reports: list[RunReport], out_dir: str) -> dict[str, list[str]]:
    """Writes each report's PNGs into `out_dir`; `{title: [paths]}`."""
    os.makedirs(out_dir, exist_ok=True)
    written = {}
    for report in reports:
        slug = _slug(report.title)
        paths = []
        norms = os.path.join(out_dir, f"{slug}_norms.png")
        plot_norms(report, norms)
        paths.append(norms)
        heatmap = os.path.join(out_dir, f"{slug}_layers.png")
        if plot_layer_heatmap(report, heatmap):
            paths.append(heatmap)
        written[report.title] = paths
    return written


def _html_table(rows: list[list[str]]) -> str:
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


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}
th{background:#f3f3f3}.warning{color:#a86b00}.critical{color:#c00;font-weight:bold}
img{max-width:100%;display:block;margin:0.5em 0}
"""


def report_html(
    log_dir: str, reports: list[RunReport], plots: dict[str, list[str]]
) -> str:
    """A self-contained HTML page: tables, alerts and the plots inline."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>keras-gradmon report: {html.escape(log_dir)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>keras-gradmon report</h1><p>{html.escape(log_dir)}</p>",
    ]
    if reports:
        parts.append(_html_table(summary_rows(reports)))
    else:
        parts.append("<p>No keras_gradmon data in these event files.</p>")
    for report in reports:
        parts.append(f"<h2>{html.escape(report.title)}</h2>")
        details = run_text(report, max_alerts=0).splitlines()[1:]
        details = [d for d in details if not d.startswith(("alerts", "unhealthy"))]
        parts.append("<p>" + "<br>".join(html.escape(d) for d in details) + "</p>")
        if report.alerts:
            parts.append(f"<h3>Alerts ({len(report.alerts)})</h3><ul>")
            for alert in report.alerts:
                tier = html.escape(str(alert.get("tier", "")))
                parts.append(
                    f"<li class='{tier}'>{html.escape(_alert_line(alert))}</li>"
                )
            parts.append("</ul>")
        if report.findings:
            rows = [["layer", "problem", "reason"]] + [
                [f.layer, f.kind, f.reason] for f in report.findings
            ]
            parts.append("<h3>Unhealthy layers</h3>" + _html_table(rows))
        parts.extend(_image(path) for path in plots.get(report.title, []))
    parts.append("</body></html>")
    return "\n".join(parts)
