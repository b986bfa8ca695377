"""`ClipFractionRule`: most recent steps clipped (the Deep Learning Tuning
Playbook's rule: clipping is then doing the learning rate's job)."""

from __future__ import annotations

from collections import deque

from keras_gradmon import _validation
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import Alert

#: The metric (tag statistic) and subject the rule reads: `clip/fraction`.
CLIP = "clip"
FRACTION = "fraction"
CLIP_FRACTION_HINT = (
    "clipping is doing the learning rate's job: lower the learning rate, or "
    "raise max_norm"
)


def steps_covered(step: int, previous: int | None) -> int:
    """How many steps the `clip/fraction` of the summary at `step` covers:
    those since the summary at `previous`, or steps 0 to `step` for the
    first summary (at least 1).

    Example:

    >>> steps_covered(0, None), steps_covered(300, 200)
    (1, 100)
    """
    return max(step + 1 if previous is None else step - previous, 1)


class ClipFractionRule(Rule):
    """Warns when more than `fraction` of the last `window` steps were clipped.

    Reads `clip/fraction`, which each summary writes as the fraction of the
    steps since the previous summary that were clipped (written when
    clipping is on; without it the rule stays silent). The window is in
    steps, not summaries: each summary's fraction is weighted by the steps
    it covers (the step difference to the previous summary; the first
    summary covers steps 0 to its own), and the oldest summary in the window
    only by its steps inside it. No decision is made before the summaries
    cover a whole window.

    Edge-triggered: it fires once when the windowed fraction exceeds
    `fraction`, and again only after it fell to `fraction` or below and
    rose above it anew (one alert per episode, not one per summary).

    Args:
        window: How many of the most recent steps the fraction is taken over.
        fraction: Warn above this share of clipped steps, in (0, 1).
        hint: Overrides the default hint.
        metric: Metric to read; default "clip" (its subject "fraction").

    Example:

    >>> rule = ClipFractionRule(window=100)
    >>> rule.update(0, {"fraction": 1.0}), rule.update(50, {"fraction": 1.0})
    ([], [])
    >>> [a.message for a in rule.update(100, {"fraction": 0.8})][0][:46]
    'WARNING clipping fraction at step 100: clip/fr'
    """

    name = "clip_fraction"
    default_metric = CLIP
    default_hint = CLIP_FRACTION_HINT

    def __init__(
        self,
        window: int = 1000,
        fraction: float = 0.5,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=rf"^{FRACTION}$", hint=hint, metric=metric)
        self.window = _validation.positive_int("window", window)
        self.fraction = _validation.open_unit_interval("fraction", fraction)
        # (steps covered, fraction clipped) per summary, newest last.
        self._summaries: deque[tuple[int, float]] = deque()
        self._previous: int | None = None
        self._firing = False

    def reset(self) -> None:
        super().reset()
        self._summaries.clear()
        self._previous = None
        self._firing = False

    def windowed(self) -> tuple[int, float]:
        """`(steps covered, fraction clipped)` over the last `window` steps
        of the summaries seen."""
        covered, clipped = 0, 0.0
        for steps, fraction in reversed(self._summaries):
            steps = min(steps, self.window - covered)
            covered += steps
            clipped += steps * fraction
            if covered >= self.window:
                break
        return covered, (clipped / covered if covered else 0.0)

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        value = values.get(FRACTION)
        if value is None:
            return []
        steps = steps_covered(step, self._previous)
        self._previous = step
        self._summaries.append((steps, min(max(value, 0.0), 1.0)))
        total = sum(s for s, _ in self._summaries)
        while total - self._summaries[0][0] >= self.window:
            total -= self._summaries.popleft()[0]  # all older than the window
        covered, clipped = self.windowed()
        if covered < self.window:
            return []
        above = clipped > self.fraction
        fire, self._firing = above and not self._firing, above
        if not fire:
            return []
        return [
            self._alert(
                step,
                "global",
                clipped,
                self.fraction,
                measured=f"{self.metric}/{FRACTION}",
                context=f" over the last {self.window} steps",
                details={"window": self.window, "fraction": self.fraction},
            )
        ]

    def __repr__(self) -> str:
        return f"ClipFractionRule(window={self.window!r}, fraction={self.fraction!r})"
