"""A run's health line and alert incidents on the dashboard: the verdict of
`keras-gradmon report` (`keras_gradmon.report.analysis.analyze`), computed
by the same code over the numbers the data provider serves.

Example:

>>> from keras_gradmon.report.accumulator import Run
>>> health(Run("empty", {}, [], []))["verdict"]
'no keras_gradmon numbers in this run'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from keras_gradmon.alerts.events import CRITICAL, WARNING
from keras_gradmon.alerts.incidents import Incident
from keras_gradmon.dashboard.reading import Alerts, Grid, Listing, Source
from keras_gradmon.formatting import format_number
from keras_gradmon.report.accumulator import Run, RunAccumulator
from keras_gradmon.report.analysis import RunReport, analyze


def report_run(
    source: Source, run: str, listing: Listing, grid: Grid, alerts: Alerts
) -> Run:
    """The report's `Run` of what the data provider serves: every scalar,
    each table number as its scalar tag (`grid.scalars`), the histogram
    tags and the alerts. The one place the dashboard builds a `Run`.

    Example:

    >>> run = report_run(source, "run_a", listing, grid, alerts)  # doctest: +SKIP
    """
    reader = RunAccumulator()
    scalars = source.scalars(run, listing.scalars)
    scalars.update(grid.scalars)
    for tag, points in scalars.items():
        steps = np.array(sorted(points), dtype=np.int64)
        values = np.array([points[step] for step in steps], dtype=np.float64)
        reader.add_scalars(tag, steps, values)
    for tag in listing.histograms:
        reader.add_histogram_tag(tag)
    reader.add_alerts(alerts.records)
    return reader.run(run)


def incident(item: Incident) -> dict[str, Any]:
    """One incident in plain words: rule, subject, tier, first and last
    step, count, worst value and the hint."""
    first, worst = item.first, item.worst
    return {
        "tier": first.tier,
        "rule": first.rule,
        "subject": first.subject,
        "first": first.step,
        "last": item.last.step,
        "count": item.count,
        "worst": worst.value,
        "worst_step": worst.step,
        "metric": worst.metric,
        "text": (
            f"{first.tier} {first.rule} on {first.subject!r}: steps {first.step} "
            f"to {item.last.step}, {item.count} alert(s); worst {worst.metric} = "
            f"{format_number(worst.value)} at step {worst.step} (threshold "
            f"{format_number(worst.threshold)})"
        ),
        "hint": first.hint,
    }


def verdict(report: RunReport) -> tuple[str, str]:
    """`(status, line)`: "critical", "warning" or "ok", and the line the
    report's summary table says in words (alerts, unhealthy layers).

    Example:

    >>> from keras_gradmon.report.accumulator import Run
    >>> verdict(analyze([Run("r", {"grad_norm/global": {0: 1.0}}, [], [])])[0])
    ('ok', 'healthy: no alerts, no unhealthy layers')
    """
    critical, warning = report.alert_count(CRITICAL), report.alert_count(WARNING)
    layers = sorted({f"{f.layer} ({f.kind})" for f in report.findings})
    if not (critical or warning or layers):
        return "ok", "healthy: no alerts, no unhealthy layers"
    parts = []
    if critical or warning:
        parts.append(f"{critical} critical and {warning} warning alert(s)")
    parts.append(
        f"unhealthy layers: {', '.join(layers)}" if layers else "no unhealthy layers"
    )
    status = CRITICAL if critical else WARNING
    return status, "; ".join(parts)


def _report(report: RunReport) -> dict[str, Any]:
    status, line = verdict(report)
    norm = report.norm
    return {
        "title": report.title,
        "scope": report.scope,
        "status": status,
        "verdict": line,
        "norm": None
        if norm is None
        else (
            f"global gradient norm: median {format_number(norm.median)}, max "
            f"{format_number(norm.max)} at step {norm.peak_step} ({norm.summaries} "
            f"summaries, steps {norm.first_step}-{norm.last_step})"
        ),
        "findings": [
            {"layer": f.layer, "kind": f.kind, "reason": f.reason}
            for f in report.findings
        ],
        "caption": report.timeline.caption,
        "incidents": [incident(i) for i in report.timeline.incidents],
    }


def health(run: Run) -> dict[str, Any]:
    """The verdict of each monitored optimizer in `run`, and its incidents.
    The report's own failure on data it did not expect is said, not raised:
    the page shows what it could read."""
    try:
        reports = [_report(report) for report in analyze([run])]
    except Exception as error:
        return {
            "verdict": f"the report could not read this run: {type(error).__name__}: "
            f"{error}",
            "reports": [],
        }
    if not reports:
        return {"verdict": "no keras_gradmon numbers in this run", "reports": []}
    return {
        "verdict": "; ".join(f"{r['title']}: {r['verdict']}" for r in reports),
        "reports": reports,
    }
