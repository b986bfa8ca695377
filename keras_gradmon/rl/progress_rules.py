"""Alert rules over training progress: intensity, return, throughput.

Pure Python, fed by `RLHealthMonitor` (see `keras_gradmon.rl.rules`).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping

from keras_gradmon import _validation
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import Alert, format_number
from keras_gradmon.rl.streak import StreakRule, Streaks

INTENSITY = "training intensity"  # {"replay": batch x train steps / env steps}
RETURN = "return"  # {"episodes": mean of the last N, "evaluation": eval mean}
THROUGHPUT = "env steps/s"  # {"collection": environment steps per second}


class LowIntensityRule(StreakRule):
    """Warns when the training intensity stays below `minimum` (1: some
    samples are never trained on) for `patience` consecutive summaries
    spanning `steps` steps (see `StreakRule`; the intensity is measured
    once an environment step is collected).

    Args:
        minimum: Fires below this intensity (> 0).
        patience: Consecutive summaries below `minimum` before it fires.
        steps: Steps those summaries must span (the default rules: 1,000,
            so that a replay buffer's prefill, which makes the first steps'
            intensity low, is not a streak).

    Example:

    >>> rule = LowIntensityRule(patience=1)
    >>> [a.value for a in rule.update(10, {"replay": 0.5})]
    [0.5]
    """

    name = "low"
    default_metric = INTENSITY
    comparison = "<"
    default_hint = (
        "train more per environment step: more train steps per iteration, a "
        "larger batch, or fewer collect steps per iteration"
    )

    def __init__(
        self, minimum: float = 1.0, patience: int = 2, steps: int = 0
    ) -> None:
        super().__init__(patience, steps)
        self.minimum = _validation.positive_finite("minimum", minimum)

    @property
    def limit(self) -> float:
        return self.minimum

    def breached(self, value: float) -> bool:
        return value < self.minimum


class ReturnCollapseRule(Rule):
    """Warns when the mean return falls from its running best by `drop` of
    the way from `baseline` (a random agent's return, 0 by default) to the
    best: below `best - drop * (best - baseline)`, once the best is above
    `baseline` (before, there is no progress to lose). Each subject
    (collect "episodes", "evaluation") has its own best, the highest mean
    it was fed; `RLHealthMonitor` feeds the collect return once 10
    episodes are kept (`readings.MIN_EPISODES`) and every evaluation.

    Args:
        drop: The fraction of the progress lost that fires (0, 1).
        baseline: The return that counts as no progress.
        subjects: Regex on the subjects it judges; "evaluation" judges the
            evaluations only (then any `window` will do). None: both.

    Example:

    >>> rule = ReturnCollapseRule(drop=0.5)
    >>> rule.update(1000, {"episodes": 180.0}), rule.update(2000, {"episodes": 120.0})
    ([], [])
    >>> [a.threshold for a in rule.update(2500, {"episodes": 60.0})]
    [90.0]
    """

    name = "collapse"
    default_metric = RETURN
    comparison = "<"
    default_hint = (
        "the agent unlearned: lower the learning rate, update the target "
        "network more slowly, clip gradients, or keep the best checkpoint"
    )

    def __init__(
        self,
        drop: float = 0.5,
        baseline: float = 0.0,
        *,
        subjects: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects)
        self.drop = _validation.open_unit_interval("drop", drop)
        if not isinstance(baseline, (int, float)) or isinstance(baseline, bool):
            raise ValueError(
                f"`baseline` must be a number. Received: baseline={baseline!r}"
            )
        self.baseline = float(baseline)
        self._best: dict[str, tuple[int, float]] = {}
        self._last_steps: dict[str, int] = {}

    def reset(self) -> None:
        super().reset()
        self._best.clear()
        self._last_steps.clear()

    def update(self, step: int, values: Mapping[str, float]) -> list[Alert]:
        """As `Rule.update`, with freshness per subject: the collect
        episodes ("episodes", at summaries) and evaluations ("evaluation",
        whenever they are recorded) may arrive at the same step."""
        step, alerts = int(step), []
        for subject, value in values.items():
            last = self._last_steps.get(subject)
            if last is not None and step <= last:
                continue
            self.last_step = None
            alerts += super().update(step, {subject: value})
            self._last_steps[subject] = step
        return alerts

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            best_step, best = self._best.get(subject, (step, value))
            if value > best:
                best_step, best = step, value
            self._best[subject] = (best_step, best)
            threshold = best - self.drop * (best - self.baseline)
            if best > self.baseline and value < threshold:
                alerts.append(
                    self._alert(
                        step,
                        subject,
                        value,
                        threshold,
                        context=f" (best {format_number(best)} at step {best_step})",
                        details={"best": best, "best_step": best_step},
                    )
                )
        return alerts


class ThroughputDropRule(Rule):
    """Warns when environment steps per second stay below `1 - drop` times
    their median over the previous `history` normal summaries for
    `patience` consecutive summaries spanning `steps` steps (one slow
    interval, e.g. an evaluation pause, is not a drop). A summary is
    normal when it is not below that; until `history` normal summaries are
    kept, every summary is normal (no median to judge against yet).

    Args:
        drop: The fraction of the median lost that counts as slow (0, 1).
        history: Normal summaries the median is taken over.
        patience: Consecutive slow summaries before it fires.
        steps: Steps those summaries must span (the default rules: 1,000;
            at a summary every step, one step's speed is noise).

    Example:

    >>> rule = ThroughputDropRule(drop=0.5, history=3, patience=2)
    >>> for step, sps in [(1, 1000.0), (2, 1100.0), (3, 900.0), (4, 300.0)]:
    ...     _ = rule.update(step, {"collection": sps})
    >>> [a.threshold for a in rule.update(5, {"collection": 200.0})]
    [500.0]
    """

    name = "drop"
    default_metric = THROUGHPUT
    comparison = "<"
    default_hint = (
        "the environment or the host slowed down: check for other processes, "
        "a growing replay buffer, or summaries written too often"
    )

    def __init__(
        self, drop: float = 0.5, history: int = 5, patience: int = 2, steps: int = 0
    ) -> None:
        super().__init__()
        self.drop = _validation.open_unit_interval("drop", drop)
        self.history = _validation.positive_int("history", history)
        self.slow = Streaks(patience, steps)
        self._normal: dict[str, deque[float]] = {}

    @property
    def patience(self) -> int:
        return self.slow.patience

    def reset(self) -> None:
        super().reset()
        self._normal.clear()
        self.slow.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            normal = self._normal.setdefault(subject, deque(maxlen=self.history))
            full = len(normal) == self.history
            typical = statistics.median(normal) if full else None
            if typical is None or value >= (1.0 - self.drop) * typical:
                normal.append(value)  # the reference learns normal speeds only
                self.slow.end(subject)
                continue
            if self.slow.extend(subject, step):
                context = self.slow.context(subject, step)
                alerts.append(
                    self._alert(
                        step,
                        subject,
                        value,
                        (1.0 - self.drop) * typical,
                        context=f"{context} (median {format_number(typical)} before)",
                        details={"median": typical},
                    )
                )
        return alerts
