"""What a scenario returns, and the console it printed.

`Outcome` holds every alert a run raised (the engine's whole record, not
the folded console) beside the console lines themselves, the step of the
fault a faulty run injects, and how long it took.

Example:

>>> outcome = Outcome("healthy", steps=10, fault_step=None)
>>> outcome.false_alarms, outcome.delay()
([], None)
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator

from keras_gradmon.alerts import Alert

LOGGER = "keras_gradmon"


@dataclasses.dataclass
class Outcome:
    """One scenario's run.

    Attributes:
        name: The scenario.
        steps: The steps trained.
        fault_step: The step the fault was injected at (None: healthy).
        alerts: Every alert raised, in order.
        lines: The console lines the alerts printed.
        seconds: The run's wall time.
        final_loss: The training loss of the last epoch.
    """

    name: str
    steps: int
    fault_step: int | None
    alerts: list[Alert] = dataclasses.field(default_factory=list)
    lines: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    final_loss: float | None = None

    @property
    def false_alarms(self) -> list[Alert]:
        """The alerts raised before the fault (all of a healthy run's)."""
        end = self.steps if self.fault_step is None else self.fault_step
        return [a for a in self.alerts if a.step < end]

    def first(self, rule: str | None = None, tier: str | None = None) -> Alert | None:
        """The first alert at or after the fault, of `rule` and `tier` if
        given."""
        start = 0 if self.fault_step is None else self.fault_step
        for alert in self.alerts:
            wanted = rule in (None, alert.rule) and tier in (None, alert.tier)
            if alert.step >= start and wanted:
                return alert
        return None

    def delay(self, rule: str | None = None, tier: str | None = None) -> int | None:
        """Steps from the fault to its first alert (None: none, or healthy)."""
        alert = self.first(rule, tier)
        if alert is None or self.fault_step is None:
            return None
        return alert.step - self.fault_step


    def to_dict(self, rule: str | None = None, tier: str | None = None) -> dict:
        """The outcome as JSON data, with the delay of the first alert of
        `rule` and `tier` (any if None)."""
        plain = ("name", "steps", "fault_step", "lines", "seconds", "final_loss")
        return {
            **{name: getattr(self, name) for name in plain},
            "alerts": [alert.to_dict() for alert in self.alerts],
            "false_alarms": [alert.to_dict() for alert in self.false_alarms],
            "delay": self.delay(rule, tier),
        }


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def console(outcome: Outcome) -> Iterator[Outcome]:
    """Collects the alert log lines into `outcome.lines` and times the run."""
    handler, logger = _Lines(), logging.getLogger(LOGGER)
    logger.addHandler(handler)
    start = time.perf_counter()
    try:
        yield outcome
    finally:
        logger.removeHandler(handler)
        outcome.seconds = time.perf_counter() - start
        outcome.lines.extend(handler.lines)
