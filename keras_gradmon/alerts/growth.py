"""`GrowthRule`: a value many times its recent minimum."""

from __future__ import annotations

from collections import deque

from keras_gradmon import _validation
from keras_gradmon.alerts.base import EXPLOSION_HINT, Rule
from keras_gradmon.alerts.events import Alert, format_number


class GrowthRule(Rule):
    """Warns when a value is `factor` times the minimum of the last `window`.

    This is the shape of an explosion (5,191 -> 130,486 -> 826,256) and,
    unlike a threshold, needs no model-specific scale. The minimum is taken
    over the positive values among the previous `window` summaries of the
    subject (fewer at the start of training, but at least one): a zero norm,
    e.g. a variable not yet reached by the loss, would otherwise make any
    later value infinite growth. The rule reports on every summary the
    condition holds, so an explosion that keeps growing keeps firing.

    Args:
        factor: Growth ratio that triggers the warning (> 1).
        window: How many previous summaries the minimum is taken over.
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
        window: int = 3,
        subjects: str | None = None,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        self.factor = _validation.greater_than_one("factor", factor)
        self.window = _validation.positive_int("window", window)
        self._recent: dict[str, deque[float]] = {}

    def reset(self) -> None:
        super().reset()
        self._recent.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            recent = self._recent.setdefault(subject, deque(maxlen=self.window))
            positive = [v for v in recent if v > 0]
            previous = len(recent)
            recent.append(value)
            if not positive:
                continue
            minimum = min(positive)
            threshold = self.factor * minimum
            if value < threshold:
                continue
            ratio = value / minimum
            span = "summary" if previous == 1 else f"{previous} summaries"
            alerts.append(
                self._alert(
                    step,
                    subject,
                    value,
                    threshold,
                    context=(
                        f" ({format_number(ratio)}x the minimum "
                        f"{format_number(minimum)} of the previous {span})"
                    ),
                    details={
                        "ratio": ratio,
                        "minimum": minimum,
                        "factor": self.factor,
                        "window": self.window,
                    },
                )
            )
        return alerts

    def __repr__(self) -> str:
        return (
            f"GrowthRule(factor={self.factor!r}, window={self.window!r}, "
            f"subjects={self.subjects!r})"
        )
