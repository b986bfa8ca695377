"""The alert rules that judge a value against the run's own scale
(`RunningLevel`): growth, spikes, and spikes between summaries.

`RunningLevel`: a subject's typical value over its last steps.

The growth and spike rules judge a new value against the run's own scale:
the median of log(value) over the last `window` steps (its level), and the
standard deviation of log(value) there (its spread). The median is robust:
a few wild summaries, the bursts of noise once the loss is near zero or the
first summaries of an explosion do not move it. The spread includes the
heavy tail of a noisy run, so that a norm that often jumps 5x between
batches is judged on that scale. The window is counted in steps, not
summaries, so a rule means the same at `every_n_steps=1` and at 100; at
least `min_samples` summaries are kept whatever their age (sparse summaries
still give a spread), and at most `max_samples` (denser summaries are
thinned to one per `window / max_samples` steps), so the cost does not grow
with the frequency. Beside them it keeps the largest value of the same
steps (every value, thinned or not), so a rule can tell a new high from the
heavy tail the run has already shown.

`GrowthRule`: a value many times its run's own level.

`SpikeRule`: a value far above its own recent history.

What happened between two summaries: a gradient spike seen only in
`spikes/max_norm` (`IntervalSpikeRule`), a spiking step that `skip_spikes`
skipped (`SkippedSpikeRule`).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import deque

from keras_gradmon import validation
from keras_gradmon.alerts.base import EXPLOSION_HINT, Rule
from keras_gradmon.alerts.events import Alert
from keras_gradmon.columns import GLOBAL
from keras_gradmon.formatting import format_number


class RunningLevel:
    """The median and spread of log(value) over the last `window` steps.

    Args:
        window: Steps of history: a sample more than `window` steps older
            than the newest is dropped, unless only `min_samples` are left.
        min_samples: Samples kept whatever their age.
        max_samples: At most about this many samples are kept: when
            summaries are denser than `window / max_samples` steps apart,
            one sample per such stride enters.

    Example:

    >>> level = RunningLevel(window=100)
    >>> for step, value in [(1, 1.0), (2, 4.0), (3, 2.0)]:
    ...     level.add(step, value)
    >>> round(level.value(), 6), round(level.peak(), 6), level.span(4), len(level)
    (2.0, 4.0, 3, 3)
    """

    def __init__(
        self, window: int, min_samples: int = 20, max_samples: int = 256
    ) -> None:
        self.window = window
        self.min_samples = min_samples
        self.stride = max(1, window // max_samples)
        self._samples: deque[tuple[int, float]] = deque()
        # The same logs in order (the median in O(1)) and their sums (the
        # std in O(1)): a rule judges every summary of every subject.
        self._sorted: list[float] = []
        self._sum = 0.0
        self._sum_sq = 0.0
        # Every value's log since the oldest sample kept, each smaller than
        # the one before it: the first is the largest (a monotonic queue).
        self._peaks: deque[tuple[int, float]] = deque()

    def add(self, step: int, value: float) -> None:
        """Takes a finite, positive `value` seen at `step` (others are
        ignored: they have no log)."""
        if not (value > 0 and math.isfinite(value)):
            return
        y = math.log(value)
        while self._peaks and self._peaks[-1][1] <= y:
            self._peaks.pop()
        self._peaks.append((step, y))
        if not self._samples or step - self._samples[-1][0] >= self.stride:
            self._samples.append((step, y))
            bisect.insort(self._sorted, y)
            self._sum += y
            self._sum_sq += y * y
        while (
            len(self._samples) > self.min_samples
            and step - self._samples[0][0] > self.window
        ):
            _, old = self._samples.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
            self._sum -= old
            self._sum_sq -= old * old
        while self._peaks[0][0] < self._samples[0][0]:
            self._peaks.popleft()

    def span(self, step: int) -> int:
        """Steps from the oldest sample kept to `step` (0 with none)."""
        return step - self._samples[0][0] if self._samples else 0

    def log_median(self) -> float:
        """The median of log(value) over the samples kept."""
        ordered, middle = self._sorted, len(self._sorted) // 2
        if len(ordered) % 2:
            return ordered[middle]
        return 0.5 * (ordered[middle - 1] + ordered[middle])

    def value(self) -> float:
        """The level itself: exp of the median of log(value)."""
        return math.exp(self.log_median())

    def peak(self) -> float:
        """The largest value seen since the oldest sample kept (every value
        counts, also those the thinning left out of the samples)."""
        return math.exp(self._peaks[0][1])

    def log_std(self) -> float:
        """The standard deviation of log(value) over the samples kept."""
        count = len(self._samples)
        mean = self._sum / count
        return math.sqrt(max(self._sum_sq / count - mean * mean, 0.0))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunningLevel):
            return NotImplemented
        mine = (self.window, self.min_samples, self.stride, self._samples)
        theirs = (other.window, other.min_samples, other.stride, other._samples)
        return mine == theirs and self._peaks == other._peaks

    def __len__(self) -> int:
        return len(self._samples)


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
        self.factor = validation.greater_than_one("factor", factor)
        self.window = validation.positive_int("window", window)
        self.warmup = validation.positive_int("warmup", warmup)
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
        self.min_samples = validation.positive_int("min_samples", min_samples)
        self.z_threshold = validation.positive_finite("z_threshold", z_threshold)
        self.window = validation.positive_int("window", window)
        self.warmup = validation.positive_int("warmup", warmup)
        self.min_log_std = validation.positive_finite("min_log_std", min_log_std)
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


#: The metric (tag statistic) of the norms between summaries:
#: `spikes/max_norm`, `spikes/min_norm`, `spikes/max_step`.
SPIKES = "spikes"
#: The metric of the skip counters: `skipped/steps`, `skipped/spikes`.
SKIPPED = "skipped"
SKIPPED_HINT = (
    "the update was not applied (weights and optimizer state untouched); if "
    "it recurs, lower the learning rate or enable global-norm clipping"
)


class IntervalSpikeRule(SpikeRule):
    """`SpikeRule` over the largest global norm since the previous summary.

    With `track_spikes=True` each summary writes `spikes/max_norm`, the
    largest pre-clip global gradient norm of the steps since the previous
    summary (that summary's step included), and `spikes/max_step`, the
    step it was seen at. This rule keeps its own log-space history of those
    maxima (over `window` steps) and flags one far above it, exactly as
    `SpikeRule` does; the
    alert is dated at the step of the max and is a "spike" alert of
    subject "global" (it shares a `RateLimiter` cooldown with the global
    norm's spike rule). A max seen at the summary's own step is left to the
    spike rule on `grad_norm/global`, which sees it too (no double alert).

    Args:
        z_threshold, window, warmup, min_samples, min_log_std, hint: As
            for `SpikeRule`.
        metric: Metric to read; default "spikes" (its subjects "max_norm"
            and "max_step").

    Example:

    >>> rule = IntervalSpikeRule(warmup=500)
    >>> for s in range(1, 12):
    ...     _ = rule.update(100 * s, {"max_norm": 1.0 + 0.1 * (s % 2),
    ...                               "max_step": 100.0 * s - 50})
    >>> [a.step for a in rule.update(1200, {"max_norm": 50.0, "max_step": 1137.0})]
    [1137]
    """

    default_metric = SPIKES

    def __init__(
        self,
        z_threshold: float = 6.0,
        window: int = 1000,
        warmup: int = 100,
        *,
        min_samples: int = 10,
        min_log_std: float = 0.15,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(
            z_threshold,
            window,
            warmup,
            r"^max_(norm|step)$",
            min_samples=min_samples,
            min_log_std=min_log_std,
            hint=hint,
            metric=metric,
        )

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        norm, at = values.get("max_norm"), values.get("max_step")
        if norm is None or norm <= 0:
            return []
        alert = self._observe(step, GLOBAL, norm)
        at = step if at is None else int(at)
        if alert is None or at == step:
            return []
        return [
            dataclasses.replace(
                alert,
                step=at,
                metric=f"{self.metric}/max_norm",
                # " (z = ...)" of the spike rule, after what the norm is.
                context=(
                    f" (the largest norm between summaries, written with the "
                    f"summary of step {step}; {alert.context.lstrip(' (')}"
                ),
                details={**alert.details, "summary_step": step},
            )
        ]


class SkippedSpikeRule(Rule):
    """Warns each time `skipped/spikes` grows: `skip_spikes` skipped a step.

    `skipped/spikes` counts the steps skipped so far because their global
    norm was a spike (a z-score above the running mean of the last norms,
    OLMo-core's `SkipStepOptimizer`). Every increase is news: the alert
    names the summary step, the steps it covers and how many were skipped
    there (critical never: the weights were protected). When one step was
    skipped and `spikes/max_step` is written (`track_spikes`), the alert
    names the step of the largest norm of those steps: the skipped spike's.

    Args:
        hint: Overrides the default hint.
        metric: Metric to read; default "skipped" (its subject "spikes").

    Example:

    >>> rule = SkippedSpikeRule()
    >>> rule.update(100, {"steps": 0.0, "spikes": 0.0})
    []
    >>> rule.update(200, {"steps": 1.0, "spikes": 1.0})[0].context
    ' (1 spiking step skipped, steps 101 to 200)'
    """

    name = "skipped_spike"
    default_metric = SKIPPED
    default_hint = SKIPPED_HINT

    companions = (SPIKES,)

    def __init__(self, *, hint: str | None = None, metric: str | None = None) -> None:
        super().__init__(subjects=r"^spikes(/max_step)?$", hint=hint, metric=metric)
        self._count = 0.0
        self._previous: int | None = None

    def reset(self) -> None:
        super().reset()
        self._count = 0.0
        self._previous = None

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        count = values.get("spikes")
        if count is None:
            return []
        before, since = self._count, self._previous
        self._count, self._previous = count, step
        if count <= before:
            return []
        new = int(count - before)
        where = f"steps {since + 1} to {step}" if since is not None else "so far"
        at = values.get(f"{SPIKES}/max_step")
        if new == 1 and at is not None and since is not None and since < at <= step:
            where = f"at step {int(at)}, the largest norm of {where}"
        noun = "step" if new == 1 else "steps"
        return [
            self._alert(
                step,
                GLOBAL,
                count,
                before,
                measured=f"{self.metric}/spikes",
                context=f" ({new} spiking {noun} skipped, {where})",
                details={"skipped": new, "since_step": since},
            )
        ]
