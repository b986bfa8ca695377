"""`ThresholdRule`: fixed warning/critical levels on a norm."""

from __future__ import annotations

from keras_gradmon import _validation
from keras_gradmon.alerts.base import EXPLOSION_HINT, Rule
from keras_gradmon.alerts.events import CRITICAL, Alert, format_number


class ThresholdRule(Rule):
    """Tiers a norm against absolute warning and critical levels.

    A value above `warning` is a warning. A value above `critical` becomes
    critical only once it has stayed above `critical` for `critical_patience`
    consecutive summaries of that subject, like Prometheus' `for:`, so one
    noisy batch does not page anyone; until then it is reported as a warning.
    The rule reports on every summary the condition holds (use a
    `RateLimiter` to thin out repeats). A summary without a finite value for
    a subject neither extends nor breaks that subject's streak.

    Args:
        warning: Warning level, or None for critical-only.
        critical: Critical level, or None for warning-only.
        critical_patience: Consecutive summaries above `critical` before
            the alert is critical.
        subjects: Regex of subjects to check (`re.search`); None for all.
        hint: Overrides the default hint.
        metric: Metric to read; default "grad_norm".

    Example:

    >>> rule = ThresholdRule(warning=10_000, critical=50_000)
    >>> rule.update(100, {"global": 5_191.0})
    []
    >>> [a.tier for a in rule.update(200, {"global": 130_486.0})]
    ['warning']
    >>> [a.tier for a in rule.update(300, {"global": 826_256.0})]
    ['critical']
    """

    name = "threshold"
    default_hint = EXPLOSION_HINT

    def __init__(
        self,
        warning: float | None = None,
        critical: float | None = None,
        critical_patience: int = 2,
        subjects: str | None = None,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        if warning is None and critical is None:
            raise ValueError(
                "At least one of `warning` or `critical` must be given. "
                "Received: warning=None, critical=None"
            )
        self.warning = (
            None if warning is None else _validation.positive_finite("warning", warning)
        )
        self.critical = (
            None
            if critical is None
            else _validation.positive_finite("critical", critical)
        )
        if (
            self.warning is not None
            and self.critical is not None
            and self.warning >= self.critical
        ):
            raise ValueError(
                "`warning` must be smaller than `critical`. "
                f"Received: warning={warning!r}, critical={critical!r}"
            )
        self.critical_patience = _validation.positive_int(
            "critical_patience", critical_patience
        )
        self._streaks: dict[str, int] = {}

    def reset(self) -> None:
        super().reset()
        self._streaks.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            alert = self._check(step, subject, value)
            if alert is not None:
                alerts.append(alert)
        return alerts

    def _check(self, step: int, subject: str, value: float) -> Alert | None:
        above_critical = self.critical is not None and value > self.critical
        streak = self._streaks.get(subject, 0) + 1 if above_critical else 0
        self._streaks[subject] = streak
        details = {
            "warning": self.warning,
            "critical": self.critical,
            "critical_streak": streak,
            "critical_patience": self.critical_patience,
        }
        if above_critical and streak >= self.critical_patience:
            context = (
                f" for {streak} consecutive summaries"
                if self.critical_patience > 1
                else ""
            )
            return self._alert(
                step,
                subject,
                value,
                self.critical,
                tier=CRITICAL,
                context=context,
                details=details,
            )
        if above_critical:
            # Pending critical: a warning against the lowest level crossed.
            threshold = self.warning if self.warning is not None else self.critical
            context = (
                f" (critical once above {format_number(self.critical)} for "
                f"{self.critical_patience} consecutive summaries; {streak} so far)"
            )
            return self._alert(
                step, subject, value, threshold, context=context, details=details
            )
        if self.warning is not None and value > self.warning:
            return self._alert(step, subject, value, self.warning, details=details)
        return None

    def __repr__(self) -> str:
        return (
            f"ThresholdRule(warning={self.warning!r}, critical={self.critical!r}, "
            f"critical_patience={self.critical_patience!r}, "
            f"subjects={self.subjects!r})"
        )
