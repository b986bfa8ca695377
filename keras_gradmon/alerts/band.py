"""`BandRule`: a value outside a healthy band."""

from __future__ import annotations

from keras_gradmon import _validation
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import Alert


class BandRule(Rule):
    """Warns when a value stays outside the band `[low, high]`.

    Made for activation standard deviations, which stay within about 0.1
    to 2 in a healthy network: far below, signals shrink layer by layer
    (vanishing), far above they grow (exploding). Values equal to `low` or
    `high` are in the band. Like `VanishingRule` it is
    edge-triggered: it fires once, on the summary that completes a run of
    `patience` consecutive values out of band, and again only after the
    value came back into the band and left it for another run. The alert's
    threshold is the edge that was crossed. A summary without a finite
    value for a subject neither extends nor ends its run.

    Args:
        low: Values strictly below it are out of band.
        high: Values strictly above it are out of band.
        patience: Consecutive summaries out of band before the warning.
        subjects: Regex of subjects to check (`re.search`); None for all.
        hint: Overrides the default hint.
        metric: Metric to read; default "activation_std".

    Example:

    >>> rule = BandRule(low=0.5, high=2.0, patience=1)
    >>> [(a.subject, a.comparison) for a in rule.update(1, {"h1": 0.1, "h2": 1.0})]
    [('h1', '<')]
    >>> rule.update(2, {"h1": 0.1})  # the same run: said once
    []
    """

    name = "band"
    default_metric = "activation_std"
    default_hint = (
        "check the weight initialization (He for ReLU, Glorot for tanh) and the "
        "input scaling, or add normalization layers"
    )

    def __init__(
        self,
        low: float = 0.5,
        high: float = 2.0,
        patience: int = 3,
        subjects: str | None = None,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        self.low = _validation.positive_finite("low", low)
        self.high = _validation.positive_finite("high", high)
        if self.low >= self.high:
            raise ValueError(
                f"`low` must be smaller than `high`. Received: low={low!r}, "
                f"high={high!r}"
            )
        self.patience = _validation.positive_int("patience", patience)
        self._runs: dict[str, int] = {}

    def reset(self) -> None:
        super().reset()
        self._runs.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            inside = self.low <= value <= self.high
            run = 0 if inside else self._runs.get(subject, 0) + 1
            self._runs[subject] = run
            if run != self.patience:
                continue
            below = value < self.low
            alerts.append(
                self._alert(
                    step,
                    subject,
                    value,
                    self.low if below else self.high,
                    comparison="<" if below else ">",
                    context=(f" for {run} consecutive summaries" if run > 1 else "")
                    + f" (healthy band {self.low:g} to {self.high:g})",
                    details={"low": self.low, "high": self.high, "consecutive": run},
                )
            )
        return alerts

    def __repr__(self) -> str:
        return (
            f"BandRule(low={self.low!r}, high={self.high!r}, "
            f"patience={self.patience!r}, "
            f"metric={self.metric!r}, subjects={self.subjects!r})"
        )
