"""`GrowthRule`: a value many times its run's own level."""

from __future__ import annotations

from keras_gradmon import _validation
from keras_gradmon.alerts.base import EXPLOSION_HINT, Rule
from keras_gradmon.alerts.events import Alert, format_number
from keras_gradmon.alerts.level import RunningLevel


class GrowthRule(Rule):
    """Warns when a value is `factor` times its level over the last steps
    and above every value of those steps.

    This is the shape of an explosion (5,191 -> 130,486 -> 826,256) and,
    unlike a threshold, needs no model-specific scale. The level is the
    median of the subject's values over the previous `window` steps (at
    least its last 20 summaries; see `RunningLevel`), so it is the run's own
    scale: one small norm (a batch the model already fits) does not make
    ordinary values look like growth. Near convergence the median falls
    far below the occasional hard batch (a transformer at a loss of 1e-4:
    norms 100x their median every few dozen steps); a value must also be a
    new high of the window, which an explosion is at every step and that
    heavy tail is not. The rule judges a subject once its history spans
    `warmup` steps; with summaries every 100 steps that is the second
    summary. It reports on
    every summary the condition holds, so an explosion that keeps growing
    keeps firing (the console folds the repeats into an incident), and a
    jump to a plateau is said once; the plateau becomes the new normal once
    it fills half the window.

    Args:
        factor: Growth ratio that triggers the warning (> 1).
        window: Steps of history the level is the median of.
        warmup: Steps of history a subject needs before it is judged.
        subjects: Regex of subjects to check (`re.search`); None for all.
        hint: Overrides the default hint.
        metric: Metric to read; default "grad_norm".

    Example:

    >>> rule = GrowthRule()
    >>> rule.update(100, {"global": 5_191.0})
    []
    >>> [round(a.details["ratio"], 1) for a in rule.update(200, {"global": 130_486.0})]
    [25.1]
    """

    name = "growth"
    default_hint = EXPLOSION_HINT
    comparison = ">="

    def __init__(
        self,
        factor: float = 10.0,
        window: int = 1000,
        warmup: int = 100,
        subjects: str | None = None,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        self.factor = _validation.greater_than_one("factor", factor)
        self.window = _validation.positive_int("window", window)
        self.warmup = _validation.positive_int("warmup", warmup)
        self._levels: dict[str, RunningLevel] = {}

    def reset(self) -> None:
        super().reset()
        self._levels.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            level = self._levels.setdefault(subject, RunningLevel(self.window))
            if value > 0 and level.span(step) >= self.warmup:
                alert = self._judge(step, subject, value, level)
                if alert is not None:
                    alerts.append(alert)
            level.add(step, value)
        return alerts

    def _judge(
        self, step: int, subject: str, value: float, level: RunningLevel
    ) -> Alert | None:
        typical, peak = level.value(), level.peak()
        if value < self.factor * typical or value <= peak:
            return None
        ratio = value / typical
        return self._alert(
            step,
            subject,
            value,
            max(self.factor * typical, peak),
            context=(
                f" ({format_number(ratio)}x its level {format_number(typical)}, "
                f"the median of the previous {level.span(step)} steps, and above "
                f"their largest, {format_number(peak)})"
            ),
            details={
                "ratio": ratio,
                "level": typical,
                "peak": peak,
                "factor": self.factor,
                "window": self.window,
            },
        )

    def __repr__(self) -> str:
        return (
            f"GrowthRule(factor={self.factor!r}, window={self.window!r}, "
            f"warmup={self.warmup!r}, subjects={self.subjects!r})"
        )
