"""How long a condition has held: `Streaks`, and `StreakRule`, the rules
that fire once it has held long enough.

A streak is counted in summaries and spans steps. A rule whose patience is
in summaries alone means something else at every summary frequency (2
summaries are 2,000 steps at the RL monitor's default of 1,000, 2 steps at
every step), so the default rules also ask for a span in `steps`, which
means the same at every frequency.
"""

from __future__ import annotations

from keras_gradmon import _validation
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import Alert


class Streaks:
    """Per subject, the summaries in a row a condition has held and the
    step of the first of them.

    Args:
        patience: Summaries in a row before a streak is long enough.
        steps: Steps from the first summary of a streak to the current one
            before it is long enough (0: the summaries alone count).

    Example:

    >>> streaks = Streaks(patience=2, steps=100)
    >>> [streaks.extend("a", step) for step in (0, 50, 100)]
    [False, False, True]
    >>> streaks.context("a", 100)
    ' for 3 summaries since step 0'
    """

    def __init__(self, patience: int, steps: int = 0) -> None:
        self.patience = _validation.positive_int("patience", patience)
        self.steps = _validation.non_negative_int("steps", steps)
        self._runs: dict[str, tuple[int, int]] = {}

    def extend(self, subject: str, step: int) -> bool:
        """The condition holds at `step`: whether the streak is now long
        enough (`patience` summaries over at least `steps` steps)."""
        count, start = self._runs.get(subject, (0, step))
        self._runs[subject] = (count + 1, start)
        return count + 1 >= self.patience and step - start >= self.steps

    def end(self, subject: str) -> None:
        """The condition does not hold: the streak of `subject` ends."""
        self._runs.pop(subject, None)

    def count(self, subject: str) -> int:
        """Summaries in the streak of `subject` (0 without one)."""
        return self._runs.get(subject, (0, 0))[0]

    def context(self, subject: str, step: int) -> str:
        """How long it held, for an alert's message ("" for a streak of
        one summary that needs no more)."""
        count, start = self._runs[subject]
        if self.steps:
            return f" for {count} summaries since step {start}"
        return f" for {count} summaries" if self.patience > 1 else ""

    def clear(self) -> None:
        self._runs.clear()


class StreakRule(Rule):
    """A rule that fires when `breached(value)` has held for `patience`
    consecutive summaries of a subject spanning at least `steps` steps, and
    at each further one while it holds; subclasses say what a breach is and
    its `limit` (the threshold the alert names). Consecutive among the
    summaries that hold a value for the subject: one without it (not
    measured then) neither breaks nor extends the streak.

    Args:
        patience: Consecutive summaries before it fires.
        steps: Steps the streak must span, from its first summary to the
            current one (0: the summaries alone count).
    """

    def __init__(self, patience: int, steps: int = 0) -> None:
        super().__init__()
        self.streaks = Streaks(patience, steps)

    @property
    def patience(self) -> int:
        return self.streaks.patience

    @property
    def limit(self) -> float:
        raise NotImplementedError

    def breached(self, value: float) -> bool:
        raise NotImplementedError

    def reset(self) -> None:
        super().reset()
        self.streaks.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            if not self.breached(value):
                self.streaks.end(subject)
            elif self.streaks.extend(subject, step):
                context = self.streaks.context(subject, step)
                alerts.append(
                    self._alert(step, subject, value, self.limit, context=context)
                )
        return alerts
