"""`SpikeRule`: a value far above its own recent history."""

from __future__ import annotations

import math

from keras_gradmon import _validation
from keras_gradmon.alerts.base import EXPLOSION_HINT, Rule
from keras_gradmon.alerts.events import Alert, format_number
from keras_gradmon.alerts.level import RunningLevel


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


class SpikeRule(Rule):
    """Warns when a value jumps far above the spread of its recent history.

    The statistics are those of log(value) over the previous `window` steps
    (`RunningLevel`): gradient norms are heavy-tailed and vary
    multiplicatively (a 2x jump means the same at norm 0.01 as at 1,000),
    so in log space a fixed z-score means a fixed ratio. The z-score is
    taken from the median, the run's robust level, in units of the standard
    deviation, which includes the heavy tail of a noisy run: a run whose
    norm often jumps 5x between batches is judged on that scale. The std is
    floored at `min_log_std` (0.15 is about a +-15% spread), so that a long
    quiet stretch does not make ordinary noise a spike; at the defaults a
    spike is then at least exp(6 * 0.15) = 2.5 times the level. Only upward
    spikes are reported; values <= 0 have no log and are skipped, and a
    value far below the level enters the history at the lower edge of the
    spread (median - `z_threshold` std), so that one near-zero norm cannot
    widen the spread and hide the next spike.

    A subject is judged once its history spans `warmup` steps and holds at
    least `min_samples` summaries (a spread needs a few samples): from step
    100 with summaries every step, from the eleventh summary with summaries
    every 100 steps. A
    spiking value enters the history like any other: one spike barely moves
    the median, and a level that stays higher becomes the new normal once
    it fills half the window.

    Args:
        z_threshold: z-score (in log space) above which a value is a spike.
        window: Steps of history the level and spread are taken over (at
            least the last 20 summaries are kept).
        warmup: Steps of history a subject needs before it is judged.
        subjects: Regex of subjects to check (`re.search`); None for all.
        min_samples: Summaries of history a subject needs before it is
            judged.
        min_log_std: Lower bound on the log-space std used for z-scores.
        hint: Overrides the default hint.
        metric: Metric to read; default "grad_norm".

    Example:

    >>> rule = SpikeRule()
    >>> for s in range(0, 110, 10):
    ...     _ = rule.update(s, {"global": 1.0 + 0.1 * (s % 20 == 0)})
    >>> [a.rule for a in rule.update(110, {"global": 20.0})]
    ['spike']
    """

    name = "spike"
    default_hint = EXPLOSION_HINT

    def __init__(
        self,
        z_threshold: float = 6.0,
        window: int = 1000,
        warmup: int = 100,
        subjects: str | None = None,
        *,
        min_samples: int = 10,
        min_log_std: float = 0.15,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        self.min_samples = _validation.positive_int("min_samples", min_samples)
        self.z_threshold = _validation.positive_finite("z_threshold", z_threshold)
        self.window = _validation.positive_int("window", window)
        self.warmup = _validation.positive_int("warmup", warmup)
        self.min_log_std = _validation.positive_finite("min_log_std", min_log_std)
        self._levels: dict[str, RunningLevel] = {}

    def reset(self) -> None:
        super().reset()
        self._levels.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            alert = self._observe(step, subject, value)
            if alert is not None:
                alerts.append(alert)
        return alerts

    def _observe(self, step: int, subject: str, value: float) -> Alert | None:
        """Judges `value` against the subject's history, then adds it."""
        if value <= 0:
            return None
        level = self._levels.setdefault(subject, RunningLevel(self.window))
        if len(level) < self.min_samples or level.span(step) < self.warmup:
            level.add(step, value)
            return None
        center = level.log_median()
        std = max(level.log_std(), self.min_log_std)
        alert = self._judge(step, subject, value, center, std)
        # A drop enters the history at the lower edge of the spread, so
        # that one near-zero norm cannot widen it and hide the next spike.
        level.add(step, max(value, _exp(center - self.z_threshold * std)))
        return alert

    def _judge(
        self, step: int, subject: str, value: float, center: float, std: float
    ) -> Alert | None:
        z = (math.log(value) - center) / std
        if z <= self.z_threshold:
            return None
        typical = _exp(center)
        return self._alert(
            step,
            subject,
            value,
            _exp(center + self.z_threshold * std),
            context=(
                f" (z = {z:.3g} > {self.z_threshold:g} against a level of "
                f"{format_number(typical)}, the median of the previous "
                f"{self._levels[subject].span(step)} steps)"
            ),
            details={"z": z, "level": typical, "log_median": center, "log_std": std},
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(z_threshold={self.z_threshold!r}, "
            f"window={self.window!r}, warmup={self.warmup!r}, "
            f"subjects={self.subjects!r})"
        )
