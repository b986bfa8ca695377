"""The alert timeline of a run: its alerts read back from the event files,
grouped into incidents as the console groups them (`IncidentLog`: one per
(rule, subject, tier), ended by `fold_steps` quiet steps), with their first
and last step, count and worst value.

No TensorFlow or Keras: `keras_gradmon.alerts` is pure Python.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from keras_gradmon.alerts.events import Alert
from keras_gradmon.alerts.incidents import (
    DEFAULT_FOLD_STEPS,
    Incident,
    group_alerts,
)
from keras_gradmon.formatting import format_number

#: The columns of the timeline table (text and HTML).
TIMELINE_HEADER = ["tier", "rule", "subject", "first", "last", "count", "worst"]


@dataclasses.dataclass(frozen=True)
class Timeline:
    """A run's alerts as incidents.

    Attributes:
        incidents: In order of first step.
        alerts: The alerts grouped into them.
        unreadable: Alert records left out: no rule, tier, step, value,
            threshold or subject that an `Alert` can hold.
        fold_steps: Quiet steps that end an incident.

    Example:

    >>> alert = Alert("spike", "warning", 3, 9.0, 4.0, "global")
    >>> alert_timeline([alert.to_dict(), {"step": 4}]).caption
    '1 incident(s) of 1 alert(s); an incident ends after 100 quiet steps; 1 unreadable alert record(s) left out'
    """  # noqa: E501

    incidents: list[Incident]
    alerts: int
    unreadable: int
    fold_steps: int

    @property
    def caption(self) -> str:
        """E.g. "2 incident(s) of 4 alert(s); an incident ends after 100
        quiet steps"."""
        text = (
            f"{len(self.incidents)} incident(s) of {self.alerts} alert(s); an "
            f"incident ends after {self.fold_steps} quiet steps"
        )
        if self.unreadable:
            text += f"; {self.unreadable} unreadable alert record(s) left out"
        return text


def alert_timeline(
    alerts: Sequence[Mapping[str, Any]], fold_steps: int = DEFAULT_FOLD_STEPS
) -> Timeline:
    """Groups alert records (`Alert.to_dict()` dicts, in step order) into
    incidents with `keras_gradmon.alerts.incidents.group_alerts`.

    Example:

    >>> alerts = [Alert("nonfinite", "critical", step, 195.0, 0.0, "global")
    ...           for step in (10, 11, 12, 130)]
    >>> timeline = alert_timeline([a.to_dict() for a in alerts])
    >>> [(i.first.step, i.last.step, i.count) for i in timeline.incidents]
    [(10, 12, 3), (130, 130, 1)]
    """
    readable = []
    for record in alerts:
        try:
            readable.append(Alert.from_dict(record))
        except (KeyError, TypeError, ValueError):
            continue
    readable.sort(key=lambda alert: alert.step)
    incidents = group_alerts(readable, fold_steps)
    return Timeline(incidents, len(readable), len(alerts) - len(readable), fold_steps)


def incident_row(incident: Incident) -> list[str]:
    """One row of the timeline table (see `TIMELINE_HEADER`).

    Example:

    >>> incident = Incident.open(
    ...     Alert("nonfinite", "critical", 10, 195.0, 0.0, "global"), 100)
    >>> incident_row(incident)
    ['critical', 'nonfinite', 'global', '10', '10', '1', 'grad_norm = 195 @ 10']
    """
    first, worst = incident.first, incident.worst
    return [
        first.tier,
        first.rule,
        first.subject,
        str(first.step),
        str(incident.last.step),
        str(incident.count),
        f"{worst.metric} = {format_number(worst.value)} @ {worst.step}",
    ]


def timeline_rows(incidents: Sequence[Incident]) -> list[list[str]]:
    """The timeline table: `TIMELINE_HEADER`, then a row per incident.

    Example:

    >>> alerts = [Alert("spike", "warning", step, 9.0, 4.0, "global").to_dict()
    ...           for step in (3, 4)]
    >>> timeline_rows(alert_timeline(alerts).incidents)[1][3:6]
    ['3', '4', '2']
    """
    return [TIMELINE_HEADER, *(incident_row(incident) for incident in incidents)]
