"""`UpdateRatioRule`: an update/weight ratio (the effective learning rate)
that stays outside a healthy band."""

from __future__ import annotations

from keras_gradmon import _validation
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import Alert
from keras_gradmon.tag_parsing import GLOBAL

#: The metric (tag statistic) of the ratios: `update_ratio/<subject>`.
UPDATE_RATIO = "update_ratio"
#: The default band: wide enough for a healthy 1e-3 ratio whose learning rate
#: decays by 10,000x, and for the large ratios of the first steps.
LOW, HIGH = 1e-7, 1e-1
UPDATE_RATIO_HINT = (
    "far below: the layer barely learns (raise its learning rate, or check "
    "that it is trained); far above: updates are unstable (lower the learning "
    "rate, or warm it up)"
)


class UpdateRatioRule(Rule):
    """Warns when `update_ratio` stays outside `[low, high]` for `steps` steps.

    `update_ratio/<subject>` is ||w_after - w_before|| / ||w_before|| of the
    update at each summary step. Karpathy's rule of thumb puts a healthy
    ratio near 1e-3; the default band (1e-7 to 1e-1) leaves room for a
    learning-rate schedule that decays to 1e-4 of its peak and for
    the first, large steps of a freshly initialized layer, so healthy runs
    stay silent. Narrow it (e.g. 1e-4 to 1e-2) to hear about layers that
    barely learn or overshoot.

    By default it watches the groups, or "global" when no group is written
    (the rule is fed global and group ratios); `subjects=` picks subjects
    explicitly instead. A run out of band starts at the first summary out of
    band; the rule fires once the run has lasted `steps` steps (at that
    summary, 0: at once), and again only after the ratio came back into the
    band and left it anew.

    Args:
        low: Ratios strictly below it are out of band (>= 0).
        high: Ratios strictly above it are out of band.
        steps: How many steps a run out of band lasts before the warning.
        subjects: Regex of subjects to check (`re.search`); None: the
            groups, or "global" without groups.
        hint: Overrides the default hint.
        metric: Metric to read; default "update_ratio".

    Example:

    >>> rule = UpdateRatioRule(low=1e-4, high=1e-2, steps=200)
    >>> rule.update(0, {"global": 1e-3, "dense": 1e-6})
    []
    >>> rule.update(100, {"global": 1e-3, "dense": 1e-6})
    []
    >>> [a.subject for a in rule.update(200, {"global": 1e-3, "dense": 1e-6})]
    ['dense']
    """

    name = "update_ratio"
    default_metric = UPDATE_RATIO
    default_hint = UPDATE_RATIO_HINT

    def __init__(
        self,
        low: float = LOW,
        high: float = HIGH,
        steps: int = 1000,
        subjects: str | None = None,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        self.low = _validation.in_closed_range("low", low, 0.0, float("inf"))
        self.high = _validation.positive_finite("high", high)
        if self.low >= self.high:
            raise ValueError(
                f"`low` must be smaller than `high`. Received: low={low!r}, "
                f"high={high!r}"
            )
        self.steps = _validation.non_negative_int("steps", steps)
        # Subject -> (step the run out of band started, already reported).
        self._runs: dict[str, tuple[int, bool]] = {}

    def reset(self) -> None:
        super().reset()
        self._runs.clear()

    def _watched(self, values: dict[str, float]) -> dict[str, float]:
        if self.subjects is not None or set(values) <= {GLOBAL}:
            return values
        return {s: v for s, v in values.items() if s != GLOBAL}

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in self._watched(values).items():
            if self.low <= value <= self.high:
                self._runs.pop(subject, None)
                continue
            start, said = self._runs.get(subject, (step, False))
            due = not said and step - start >= self.steps
            self._runs[subject] = (start, said or due)
            if due:
                alerts.append(self._out_of_band(step, subject, value, start))
        return alerts

    def _out_of_band(self, step: int, subject: str, value: float, start: int) -> Alert:
        below = value < self.low
        return self._alert(
            step,
            subject,
            value,
            self.low if below else self.high,
            comparison="<" if below else ">",
            context=(
                f" since step {start} (healthy band {self.low:g} to {self.high:g})"
            ),
            details={"low": self.low, "high": self.high, "since": start},
        )

    def __repr__(self) -> str:
        return (
            f"UpdateRatioRule(low={self.low!r}, high={self.high!r}, "
            f"steps={self.steps!r}, subjects={self.subjects!r})"
        )
