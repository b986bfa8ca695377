"""`IncidentLog`: the console's view of the alerts, grouped into incidents.

Rules report on every summary a condition holds, so a diverging run raises
the same alert at every step. On the console (logger "keras_gradmon") the
alerts of one (rule, subject, tier) form an incident: its first alert is
logged in full, its repeats are folded into one line now and then, and one
line says when it ended. Only the console is folded: the alert list, the
JSON lines and the `alerts/<rule>` flags keep every firing.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from keras_gradmon import validation
from keras_gradmon.alerts.events import CRITICAL, Alert
from keras_gradmon.formatting import format_number

#: Default of `fold_steps`: steps between a new incident and its first
#: folded line, and the quiet steps after which an incident has ended.
DEFAULT_FOLD_STEPS = 100

logger = logging.getLogger("keras_gradmon")

#: What identifies an incident: (rule, subject, tier).
Key = tuple[str, str, str]


def incident_key(alert: Alert) -> Key:
    """The incident `alert` belongs to: its (rule, subject, tier).

    Example:

    >>> incident_key(Alert("growth", "warning", 5, 20.0, 10.0, "global"))
    ('growth', 'global', 'warning')
    """
    return (alert.rule, alert.subject, alert.tier)


def stop_line(alert: Alert) -> str:
    """The line that says `alert` stops training (its tier's action is
    "stop"): Keras ends `fit` after the current batch, and its progress bar
    still draws the stopped epoch in full, so nothing else says so.

    Example:

    >>> print(stop_line(Alert("nonfinite", CRITICAL, 5, 291.0, 0.0, "dense/kernel")))
    CRITICAL stopping training: the action of critical alerts is "stop", and non-finite gradient fired at step 5 on 'dense/kernel'. Training ends after the current batch.
    """  # noqa: E501
    return (
        f"{alert.tier.upper()} stopping training: the action of {alert.tier} "
        f'alerts is "stop", and {alert.title} fired at step {alert.step} on '
        f"{alert.subject!r}. Training ends after the current batch."
    )


def _worse(alert: Alert, than: Alert) -> bool:
    """Whether `alert` is further past its threshold than `than` (lower for
    a "<" comparison, higher otherwise)."""
    if alert.comparison.startswith("<"):
        return alert.value < than.value
    return alert.value > than.value


@dataclass
class Incident:
    """The alerts of one (rule, subject, tier) while it keeps firing.

    Attributes:
        first: The alert that opened it (logged in full).
        last: The latest alert.
        worst: The alert furthest past its threshold.
        count: Summaries it fired at, the first included.
        folded: Repeats since the last line logged about it.
        next_line: The step from which a repeat logs a folded line.
        gap: Steps from that line to the next one (doubles each time).

    Example:

    >>> def alert(step, value):
    ...     return Alert("growth", "warning", step, value, 10.0, "global")
    >>> incident = Incident.open(alert(5, 20.0), fold_steps=100)
    >>> incident.add(alert(6, 30.0))
    >>> incident.span(), incident.worst.value
    ('2 summaries, steps 5 to 6', 30.0)
    """

    first: Alert
    last: Alert
    worst: Alert
    count: int
    folded: int
    next_line: int
    gap: int

    @classmethod
    def open(cls, alert: Alert, fold_steps: int) -> Incident:
        """A new incident opened by `alert`."""
        return cls(alert, alert, alert, 1, 0, alert.step + fold_steps, fold_steps)

    def add(self, alert: Alert) -> None:
        """Counts a repeat."""
        self.last = alert
        self.count += 1
        self.folded += 1
        if _worse(alert, self.worst):
            self.worst = alert

    def line(self, verb: str, what: str) -> str:
        """`"<TIER> <title> of <subject> <verb>: <what>; worst ... ."`"""
        worst = self.worst
        return (
            f"{self.first.tier.upper()} {self.first.title} of "
            f"{self.first.subject!r} {verb}: {what}; worst {worst.metric} = "
            f"{format_number(worst.value)} at step {worst.step}."
        )

    def span(self) -> str:
        """How many summaries, first and last step."""
        noun = "summary" if self.count == 1 else "summaries"
        return f"{self.count} {noun}, steps {self.first.step} to {self.last.step}"


class IncidentGrouping:
    """Groups alerts into incidents keyed by (rule, subject, tier): what
    `IncidentLog` logs, and what `keras-gradmon report`'s alert timeline
    shows (`group_alerts`). No logging.

    An incident quiet for `fold_steps` steps has ended, and so has one whose
    last alert lies after the current step (a previous run).

    Args:
        fold_steps: Quiet steps that end an incident.

    Example:

    >>> grouping = IncidentGrouping(fold_steps=100)
    >>> for step in (1, 2):
    ...     incident = grouping.take(Alert("growth", "warning", step, 20.0, 10.0, "global"))
    >>> [i.span() for i in grouping.end(102, firing=set())]
    ['2 summaries, steps 1 to 2']
    """  # noqa: E501

    def __init__(self, fold_steps: int) -> None:
        self.fold_steps = fold_steps
        #: The incidents still going on, by key.
        self.open: dict[Key, Incident] = {}

    def end(self, step: int, firing: set[Key]) -> list[Incident]:
        """Ends and returns the incidents that, at a summary at `step` where
        the keys `firing` fire, have been quiet for `fold_steps` steps, and
        all those of a previous run (`step` before their last)."""
        ended = []
        for key, incident in list(self.open.items()):
            quiet = step - incident.last.step
            if quiet < 0 or (key not in firing and quiet >= self.fold_steps):
                ended.append(self.open.pop(key))
        return ended

    def take(self, alert: Alert) -> Incident:
        """The incident `alert` joins: its key's open one, or a new one
        (`count` 1)."""
        key = incident_key(alert)
        incident = self.open.get(key)
        if incident is None:
            incident = self.open[key] = Incident.open(alert, self.fold_steps)
        else:
            incident.add(alert)
        return incident

    def finish(self) -> list[Incident]:
        """Ends and returns every open incident (the end of training)."""
        ended = list(self.open.values())
        self.open.clear()
        return ended


def group_alerts(
    alerts: Iterable[Alert], fold_steps: int = DEFAULT_FOLD_STEPS
) -> list[Incident]:
    """Every incident of `alerts` (in step order), in order of first step.

    The grouping of `IncidentLog` with a quiet summary at the step before
    each alerting step: a repeat more than `fold_steps` steps after the last
    alert of its (rule, subject, tier) opens a new incident. (That is the
    console's grouping when every step is a summary, or when the summaries
    are every n steps for an n that divides `fold_steps`.)

    Example:

    >>> alerts = [Alert("nonfinite", "critical", step, 3.0, 0.0, "global")
    ...           for step in (10, 11, 12, 130)]
    >>> [i.span() for i in group_alerts(alerts, fold_steps=100)]
    ['3 summaries, steps 10 to 12', '1 summary, steps 130 to 130']
    """
    grouping = IncidentGrouping(fold_steps)
    found = []
    for step, at_step in itertools.groupby(alerts, key=lambda alert: alert.step):
        at_step = list(at_step)
        grouping.end(step - 1, firing=set())
        grouping.end(step, firing={incident_key(alert) for alert in at_step})
        for alert in at_step:
            incident = grouping.take(alert)
            if incident.count == 1:
                found.append(incident)
    return found


#: What a console line says about an incident.
OPENED, GOES_ON, ENDED, STILL_FIRING = (
    "opened", "goes on", "ended", "was still firing at the end"
)
#: The subjects a grouped line names before "and N more".
LISTED_SUBJECTS = 3


@dataclass(frozen=True)
class News:
    """One thing to say about an incident: `what` happened (`OPENED`,
    `GOES_ON`, `ENDED`, `STILL_FIRING`), the `alert` that said it, and the
    `incident` as it stood (None when alerts are not grouped)."""

    what: str
    alert: Alert
    incident: Incident | None

    def line(self) -> str:
        """The line of this news alone."""
        incident = self.incident
        if self.what == OPENED or incident is None:
            return self.alert.message
        if self.what == GOES_ON:
            span = f"{incident.folded} more since the last line, {incident.span()}"
            return incident.line("goes on", span)
        return incident.line(self.what, incident.span())


def grouped_line(news: list[News]) -> str:
    """One line for the same news of one rule and tier about several
    subjects (a rule firing on many layers at once): the first
    `LISTED_SUBJECTS` subjects with their values, then a count, the worst
    value and the hint.

    Example:

    >>> alerts = [Alert("threshold", "warning", 10, 0.3 + i / 100, 0.25, f"relu_{i}",
    ...                 metric="activation_dead_fraction") for i in range(5)]
    >>> print(grouped_line([News(OPENED, a, None) for a in alerts]))
    WARNING activation_dead_fraction threshold at step 10 on 5 subjects: 'relu_0' (0.3 > 0.25), 'relu_1' (0.31 > 0.25), 'relu_2' (0.32 > 0.25) and 2 more; worst 'relu_4' = 0.34.
    """  # noqa: E501
    first = news[0].alert
    alerts = [item.alert for item in news]
    worst = alerts[0]
    for alert in alerts[1:]:
        worst = alert if _worse(alert, worst) else worst
    shown = ", ".join(
        f"{a.subject!r} ({format_number(a.value)} {a.comparison} "
        f"{format_number(a.threshold)})"
        for a in alerts[:LISTED_SUBJECTS]
    )
    if len(alerts) > LISTED_SUBJECTS:
        shown += f" and {len(alerts) - LISTED_SUBJECTS} more"
    opened = news[0].what == OPENED
    what = "at step {} on" if opened else news[0].what + " at step {} for"
    return (
        f"{first.tier.upper()} {first.title} {what.format(first.step)} "
        f"{len(alerts)} subjects: {shown}; worst {worst.subject!r} = "
        f"{format_number(worst.value)}." + (first.hint_sentence if opened else "")
    )


class IncidentLog:
    """Logs alerts grouped into incidents keyed by (rule, subject, tier).

    * The first alert of an incident is logged in full, at once; so is an
      escalation (a critical is another tier, so another incident) and an
      alert about a new subject.
    * Repeats are folded: one line says how many came since the last line,
      first `fold_steps` steps after the incident opened, then after twice
      the previous gap (100, 200, 400, ... steps): a long incident logs a
      few lines, not one per summary.
    * An incident quiet for `fold_steps` steps has ended; a repeated one
      logs a closing line: how many summaries, first and last step, worst
      value. `finish()` closes those still open (the end of training).

    Lines go to logger "keras_gradmon" at the incident's tier (WARNING or
    CRITICAL).

    Args:
        fold_steps: Steps before the first folded line, and quiet steps that
            end an incident; None logs every alert in full.

    Example:

    >>> from keras_gradmon.alerts.events import WARNING
    >>> log = IncidentLog(fold_steps=100)
    >>> for step in range(1, 301):
    ...     log.log(step, [Alert("growth", WARNING, step, 20.0, 10.0, "global")])
    >>> log.finish()
    >>> log.lines_logged  # the first alert, a folded line, the closing one
    3
    """

    def __init__(self, fold_steps: int | None = DEFAULT_FOLD_STEPS) -> None:
        self.grouping = (
            None
            if fold_steps is None
            else IncidentGrouping(validation.positive_int("fold_steps", fold_steps))
        )
        #: Lines logged so far.
        self.lines_logged = 0

    @property
    def fold_steps(self) -> int | None:
        """Steps before the first folded line and quiet steps that end an
        incident; None: every alert is logged in full."""
        return None if self.grouping is None else self.grouping.fold_steps

    @property
    def open(self) -> dict[Key, Incident]:
        """The incidents still going on, by key."""
        return {} if self.grouping is None else self.grouping.open

    def log(self, step: int, alerts: Iterable[Alert]) -> None:
        """Logs the news among the `alerts` of the summary at `step`, and the
        end of the incidents that went quiet. News of one rule and tier about
        several subjects at once is one line (`grouped_line`)."""
        alerts = list(alerts)
        news: list[News | None] = []
        if self.grouping is not None:
            firing = {incident_key(alert) for alert in alerts}
            ended = self.grouping.end(step, firing)
            news += [self._close(incident, ENDED) for incident in ended]
        news += [self._take(alert) for alert in alerts]
        self._say(news)

    def finish(self) -> None:
        """Closes every open incident (e.g. at the end of training)."""
        if self.grouping is not None:
            finished = self.grouping.finish()
            self._say([self._close(incident, STILL_FIRING) for incident in finished])

    def log_stop(self, alert: Alert) -> None:
        """Logs that `alert` stops training (`stop_line`), at its tier."""
        self._emit(alert.tier, stop_line(alert))

    def _take(self, alert: Alert) -> News | None:
        incident = None if self.grouping is None else self.grouping.take(alert)
        if incident is None or incident.count == 1:
            return News(OPENED, alert, incident)
        if alert.step < incident.next_line:
            return None
        news = News(GOES_ON, alert, dataclasses.replace(incident))
        incident.folded = 0
        incident.gap *= 2
        incident.next_line = alert.step + incident.gap
        return news

    def _close(self, incident: Incident, verb: str) -> News | None:
        # An incident that never repeated was said in full already.
        return News(verb, incident.last, incident) if incident.count > 1 else None

    def _say(self, news: list[News | None]) -> None:
        """Logs `news`, one line per (what, rule, tier): the subject's own
        line when alone, else `grouped_line`; every alert alone when alerts
        are not grouped (`fold_steps=None`)."""
        grouped: dict[object, list[News]] = {}
        for item in filter(None, news):
            key = (item.what, item.alert.rule, item.alert.tier)
            grouped.setdefault(key if self.grouping else item, []).append(item)
        for items in grouped.values():
            line = items[0].line() if len(items) == 1 else grouped_line(items)
            self._emit(items[0].alert.tier, line)

    def _emit(self, tier: str, line: str) -> None:
        level = logging.CRITICAL if tier == CRITICAL else logging.WARNING
        logger.log(level, line)
        self.lines_logged += 1

    def __repr__(self) -> str:
        return f"IncidentLog(fold_steps={self.fold_steps!r})"
