"""`SpikeRule`: a value far above its own recent history."""

from __future__ import annotations

import math
from dataclasses import dataclass

from keras_gradmon import _validation
from keras_gradmon.alerts.base import EXPLOSION_HINT, Rule
from keras_gradmon.alerts.events import Alert, format_number


@dataclass
class _LogMoments:
    """Exponentially weighted mean and variance of log(value)."""

    count: int = 0
    mean: float = 0.0
    var: float = 0.0

    def weight(self, decay: float) -> float:
        # 1/n until the window is full: the first summaries then get a plain
        # running mean/variance instead of one biased towards the first value
        # (an EMA started at x0 with weight 1 - decay underestimates the
        # variance by a factor 1 - decay**n early on).
        return max(1.0 - decay, 1.0 / (self.count + 1))

    def fold(self, y: float, decay: float) -> None:
        alpha = self.weight(decay)
        diff = y - self.mean
        self.mean += alpha * diff
        self.var = (1.0 - alpha) * (self.var + alpha * diff * diff)
        self.count += 1


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


class SpikeRule(Rule):
    """Warns when a value jumps far above its exponentially weighted history.

    Statistics are kept on log(value): gradient norms are heavy-tailed and
    vary multiplicatively (a 2x jump means the same at norm 0.01 as at
    1,000), so in log space the noise is roughly symmetric and a fixed
    z-score means a fixed ratio. Only upward spikes are reported; values
    <= 0 have no log and are skipped.

    After `warmup` observations of a subject, the z-score of the new value
    against the moving log-mean and log-std is computed; above `z_threshold`
    a warning is emitted with `threshold` = the value at which z would equal
    `z_threshold`. The std is floored at `min_log_std` so a long quiet
    stretch does not make the rule fire on ordinary noise (0.15 is about a
    +-15% spread).

    A spiking value is not folded in at full weight, or a sustained
    explosion would hide itself within a few summaries. An outlier (|z| above
    `z_threshold`, either direction) moves the mean as if it sat at the
    threshold (mean +- z_threshold * std) and leaves the variance untouched:
    the baseline then creeps at a bounded pace, so a lasting level shift
    (e.g. the end of learning-rate warm-up) is reported for a while and then
    accepted as the new normal, and a sudden drop (a near-zero norm) cannot
    inflate the variance and mask the next spike. Values seen during warm-up
    are folded in fully.

    Args:
        z_threshold: z-score (in log space) above which a value is a spike.
        decay: Weight kept by the old statistics on each update; the
            effective window is about 1 / (1 - decay) summaries.
        warmup: Observations of a subject before it can be flagged.
        subjects: Regex of subjects to check (`re.search`); None for all.
        min_log_std: Lower bound on the log-space std used for z-scores.
        hint: Overrides the default hint.
        metric: Metric to read; default "grad_norm".

    Example:

    >>> rule = SpikeRule(warmup=5)
    >>> [rule.update(s, {"global": 1.0 + 0.1 * (s % 2)}) for s in range(6)][-1]
    []
    >>> [a.rule for a in rule.update(6, {"global": 20.0})]
    ['spike']
    """

    name = "spike"
    default_hint = EXPLOSION_HINT

    def __init__(
        self,
        z_threshold: float = 6.0,
        decay: float = 0.98,
        warmup: int = 20,
        subjects: str | None = None,
        *,
        min_log_std: float = 0.15,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        self.z_threshold = _validation.positive_finite("z_threshold", z_threshold)
        self.decay = _validation.open_unit_interval("decay", decay)
        self.warmup = _validation.positive_int("warmup", warmup)
        self.min_log_std = _validation.positive_finite("min_log_std", min_log_std)
        self._moments: dict[str, _LogMoments] = {}

    def reset(self) -> None:
        super().reset()
        self._moments.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            if value <= 0:
                continue
            moments = self._moments.setdefault(subject, _LogMoments())
            alert = self._observe(step, subject, value, moments)
            if alert is not None:
                alerts.append(alert)
        return alerts

    def _observe(
        self, step: int, subject: str, value: float, moments: _LogMoments
    ) -> Alert | None:
        y = math.log(value)
        if moments.count < self.warmup:
            moments.fold(y, self.decay)
            return None
        std = max(math.sqrt(moments.var), self.min_log_std)
        z = (y - moments.mean) / std
        if abs(z) <= self.z_threshold:
            moments.fold(y, self.decay)
            return None
        baseline = moments.mean
        # Outliers move the mean as if they sat at the threshold and leave
        # the variance alone (see the class docstring).
        clipped = math.copysign(self.z_threshold * std, z)
        moments.mean += moments.weight(self.decay) * clipped
        moments.count += 1
        if z < 0:
            return None
        level = _exp(baseline)
        return self._alert(
            step,
            subject,
            value,
            _exp(baseline + self.z_threshold * std),
            context=(
                f" (z = {z:.3g} > {self.z_threshold:g} against a moving level "
                f"of {format_number(level)})"
            ),
            details={"z": z, "level": level, "log_mean": baseline, "log_std": std},
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(z_threshold={self.z_threshold!r}, "
            f"decay={self.decay!r}, warmup={self.warmup!r}, "
            f"subjects={self.subjects!r})"
        )
