"""`VanishingRule`: a norm that stays below a floor."""

from __future__ import annotations

from keras_gradmon import _validation
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import Alert


class VanishingRule(Rule):
    """Warns when a subject's value stays below `floor` for `patience` summaries.

    The rule is edge-triggered: it fires once, on the summary that completes
    a run of `patience` consecutive values below the floor, and stays silent
    for the rest of that run. A value at or above the floor ends the run and
    re-arms the rule, so it fires again only if the value then falls and
    stays down for another `patience` summaries. Vanishing gradients are a
    slow, persistent condition, so repeating the alert on every summary
    would say nothing new. A summary without a finite value for a subject
    neither extends nor ends its run.

    Args:
        floor: Values strictly below it count as vanishing.
        patience: Consecutive summaries below the floor before the warning.
        subjects: Regex of subjects to check (`re.search`); None for all.
        hint: Overrides the default hint.
        metric: Metric to read; default "grad_norm".

    Example:

    >>> rule = VanishingRule(floor=1e-6, patience=2)
    >>> rule.update(1, {"dense/kernel": 1e-8})
    []
    >>> [a.step for a in rule.update(2, {"dense/kernel": 1e-9})]
    [2]
    >>> rule.update(3, {"dense/kernel": 1e-9})
    []
    """

    name = "vanishing"
    default_hint = (
        "check for dead ReLUs, saturating activations or a too-small learning "
        "rate; consider residual connections or normalization"
    )
    comparison = "<"

    def __init__(
        self,
        floor: float,
        patience: int = 3,
        subjects: str | None = None,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        self.floor = _validation.positive_finite("floor", floor)
        self.patience = _validation.positive_int("patience", patience)
        self._runs: dict[str, int] = {}

    def reset(self) -> None:
        super().reset()
        self._runs.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            run = self._runs.get(subject, 0) + 1 if value < self.floor else 0
            self._runs[subject] = run
            if run == self.patience:
                alerts.append(
                    self._alert(
                        step,
                        subject,
                        value,
                        self.floor,
                        context=(
                            f" for {run} consecutive summaries" if run > 1 else ""
                        ),
                        details={"consecutive": run, "patience": self.patience},
                    )
                )
        return alerts

    def __repr__(self) -> str:
        return (
            f"VanishingRule(floor={self.floor!r}, patience={self.patience!r}, "
            f"subjects={self.subjects!r})"
        )
