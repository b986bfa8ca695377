"""A run's health line and alert incidents on the dashboard: the verdict of
`keras-gradmon report`, computed by the same code over the numbers the data
provider serves: a report per monitored optimizer
(`keras_gradmon.report.analysis.analyze`) and one per RL health monitor
(`keras_gradmon.report.rl.analyze_rl`: its `rl/...` signals and the alerts
of its `rl[/<scope>]` tags).

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
from keras_gradmon.report.render import rl_details, run_details, summary_rows
from keras_gradmon.report.rl import RLReport, analyze_rl


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


def verdict(report: RunReport | RLReport) -> tuple[str, str]:
    """`(status, line)`: "critical", "warning" or "ok", and the line the
    report's summary table says in words: the alerts, and the unhealthy
    layers of an optimizer's report or the final return of an RL report.

    Example:

    >>> from keras_gradmon.report.accumulator import Run
    >>> verdict(analyze([Run("r", {"grad_norm/global": {0: 1.0}}, [], [])])[0])
    ('ok', 'healthy: no alerts, no unhealthy layers')
    >>> rl = Run("r", {"rl/episode/return_mean": {0: 12.5}}, [], [])
    >>> verdict(analyze_rl([rl])[0])
    ('ok', 'healthy: no RL alerts; final return 12.5')
    """
    critical, warning = report.alert_count(CRITICAL), report.alert_count(WARNING)
    status = CRITICAL if critical else WARNING if warning else "ok"
    alerts = f"{critical} critical and {warning} warning alert(s)"
    if isinstance(report, RLReport):
        parts = [alerts if critical or warning else "healthy: no RL alerts"]
        if report.final_return is not None:
            parts.append(f"final return {format_number(report.final_return)}")
        return status, "; ".join(parts)
    layers = sorted({f"{f.layer} ({f.kind})" for f in report.findings})
    if not (critical or warning or layers):
        return "ok", "healthy: no alerts, no unhealthy layers"
    parts = [alerts] if critical or warning else []
    parts.append(
        f"unhealthy layers: {', '.join(layers)}" if layers else "no unhealthy layers"
    )
    return (status if status != "ok" else WARNING), "; ".join(parts)


def _report(report: RunReport) -> dict[str, Any]:
    """An optimizer's verdict, its row of the report's comparison table
    (`summary_rows`: final loss, norms, clipped, skipped, alerts, unhealthy
    layers) and its lines (`run_details`: norm, non-finite summaries,
    clipping, skipped steps, signals, final loss, dropped steps)."""
    status, line = verdict(report)
    header, row = summary_rows([report])
    return {
        "kind": "gradients",
        "title": report.title,
        "scope": report.scope,
        "status": status,
        "verdict": line,
        "summary": dict(zip(header[1:], row[1:])),
        "details": run_details(report),
        "findings": [
            {"layer": f.layer, "kind": f.kind, "reason": f.reason}
            for f in report.findings
        ],
        "caption": report.timeline.caption,
        "incidents": [incident(i) for i in report.timeline.incidents],
    }


def _rl_report(report: RLReport) -> dict[str, Any]:
    """An RL health monitor's verdict, its signals' last values (the lines
    of `keras-gradmon report`'s RL section) and its incidents."""
    status, line = verdict(report)
    return {
        "kind": "rl",
        "title": report.title,
        "scope": report.scope,
        "status": status,
        "verdict": line,
        "summary": {},
        "details": rl_details(report),
        "findings": [],
        "caption": report.timeline.caption,
        "incidents": [incident(i) for i in report.timeline.incidents],
    }


def health(run: Run) -> dict[str, Any]:
    """The verdict of each monitored optimizer and each RL health monitor
    in `run`, and their incidents. The report's own failure on data it did
    not expect is said, not raised: the page shows what it could read."""
    found: dict[str, Any] = {"reports": [], "unread": run.unread_notes}
    try:
        found["reports"] = [_report(report) for report in analyze([run])]
        found["reports"] += [_rl_report(report) for report in analyze_rl([run])]
    except Exception as error:
        found["verdict"] = (
            f"the report could not read this run: {type(error).__name__}: {error}"
        )
        return found
    found["verdict"] = (
        "; ".join(f"{r['title']}: {r['verdict']}" for r in found["reports"])
        or "no keras_gradmon numbers in this run"
    )
    return found
