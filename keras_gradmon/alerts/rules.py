"""The alert rules that judge a value against fixed levels: thresholds,
non-finite gradients, a healthy band, the share of steps clipped, the
update/weight ratio, vanishing norms and layers.
"""

from __future__ import annotations

import math
from collections import deque

from keras_gradmon import validation
from keras_gradmon.alerts.base import EXPLOSION_HINT, GRAD_NONFINITE, Rule
from keras_gradmon.alerts.events import CRITICAL, Alert
from keras_gradmon.columns import GLOBAL
from keras_gradmon.formatting import format_number


class ThresholdRule(Rule):
    """Tiers a norm against absolute warning and critical levels.

    A value above `warning` is a warning. A value above `critical` becomes
    critical only once it has stayed above `critical` for `critical_patience`
    consecutive summaries of that subject, like Prometheus' `for:`, so one
    noisy batch does not page anyone; until then it is reported as a warning.
    The rule reports on every summary the condition holds (use a
    `RateLimiter` to thin out repeats). A summary without a finite value for
    a subject neither extends nor breaks that subject's streak.

    Args:
        warning: Warning level, or None for critical-only.
        critical: Critical level, or None for warning-only.
        critical_patience: Consecutive summaries above `critical` before
            the alert is critical.
        subjects: Regex of subjects to check (`re.search`); None for all.
        hint: Overrides the default hint.
        metric: Metric to read; default "grad_norm".

    Example:

    >>> rule = ThresholdRule(warning=10_000, critical=50_000)
    >>> rule.update(100, {"global": 5_191.0})
    []
    >>> [a.tier for a in rule.update(200, {"global": 130_486.0})]
    ['warning']
    >>> [a.tier for a in rule.update(300, {"global": 826_256.0})]
    ['critical']
    """

    name = "threshold"
    default_hint = EXPLOSION_HINT

    def __init__(
        self,
        warning: float | None = None,
        critical: float | None = None,
        critical_patience: int = 2,
        subjects: str | None = None,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        if warning is None and critical is None:
            raise ValueError(
                "At least one of `warning` or `critical` must be given. "
                "Received: warning=None, critical=None"
            )
        self.warning = (
            None if warning is None else validation.positive_finite("warning", warning)
        )
        self.critical = (
            None
            if critical is None
            else validation.positive_finite("critical", critical)
        )
        if (
            self.warning is not None
            and self.critical is not None
            and self.warning >= self.critical
        ):
            raise ValueError(
                "`warning` must be smaller than `critical`. "
                f"Received: warning={warning!r}, critical={critical!r}"
            )
        self.critical_patience = validation.positive_int(
            "critical_patience", critical_patience
        )
        self._streaks: dict[str, int] = {}

    def reset(self) -> None:
        super().reset()
        self._streaks.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            alert = self._check(step, subject, value)
            if alert is not None:
                alerts.append(alert)
        return alerts

    def _check(self, step: int, subject: str, value: float) -> Alert | None:
        above_critical = self.critical is not None and value > self.critical
        streak = self._streaks.get(subject, 0) + 1 if above_critical else 0
        self._streaks[subject] = streak
        details = {
            "warning": self.warning,
            "critical": self.critical,
            "critical_streak": streak,
            "critical_patience": self.critical_patience,
        }
        if above_critical and streak >= self.critical_patience:
            context = (
                f" for {streak} consecutive summaries"
                if self.critical_patience > 1
                else ""
            )
            return self._alert(
                step,
                subject,
                value,
                self.critical,
                tier=CRITICAL,
                context=context,
                details=details,
            )
        if above_critical:
            # Pending critical: a warning against the lowest level crossed.
            threshold = self.warning if self.warning is not None else self.critical
            context = (
                f" (critical once above {format_number(self.critical)} for "
                f"{self.critical_patience} consecutive summaries; {streak} so far)"
            )
            return self._alert(
                step, subject, value, threshold, context=context, details=details
            )
        if self.warning is not None and value > self.warning:
            return self._alert(step, subject, value, self.warning, details=details)
        return None

    def __repr__(self) -> str:
        return (
            f"ThresholdRule(warning={self.warning!r}, critical={self.critical!r}, "
            f"critical_patience={self.critical_patience!r}, "
            f"subjects={self.subjects!r})"
        )


class NonFiniteRule(Rule):
    """Critical alert when any subject reports NaN/Inf elements.

    `values` are counts of non-finite elements per subject. One alert per
    summary covers every subject with a count above 0: `details["subjects"]`
    lists them by count, largest first (ties keep the input order, which
    is usually the model's layer order), `details["counts"]` maps them to
    their counts, `value` is the total and `subject` the first listed.

    A NaN count (a broken count, or a norm fed by mistake) is taken as one
    non-finite element, since it cannot mean "none"; an infinite count stays
    infinite.

    Args:
        subjects: Regex of subjects to check (`re.search`); None for all.
        hint: Overrides the default hint.
        metric: Metric to read; default "grad_nonfinite".

    Example:

    >>> alert, = NonFiniteRule().update(
    ...     5, {"dense/bias": 2.0, "dense/kernel": 10.0, "out/kernel": 0.0})
    >>> alert.value, alert.subject, alert.details["subjects"]
    (12.0, 'dense/kernel', ['dense/kernel', 'dense/bias'])
    """

    name = "nonfinite"
    default_hint = (
        "look at the first variable listed; enable skip_nonfinite in the config "
        "to protect the weights"
    )
    default_metric = GRAD_NONFINITE
    keeps_nonfinite = True

    def __init__(
        self,
        subjects: str | None = None,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        counts = {
            subject: 1.0 if math.isnan(count) else count
            for subject, count in values.items()
        }
        counts = {subject: c for subject, c in counts.items() if c > 0}
        if not counts:
            return []
        # sorted() is stable, so equal counts keep their input order.
        ranked = sorted(counts.items(), key=lambda item: -item[1])
        total = sum(count for _, count in ranked)
        return [
            self._alert(
                step,
                ranked[0][0],
                total,
                0.0,
                tier=CRITICAL,
                details={
                    "subjects": [subject for subject, _ in ranked],
                    "counts": dict(ranked),
                },
            )
        ]


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
        self.low = validation.positive_finite("low", low)
        self.high = validation.positive_finite("high", high)
        if self.low >= self.high:
            raise ValueError(
                f"`low` must be smaller than `high`. Received: low={low!r}, "
                f"high={high!r}"
            )
        self.patience = validation.positive_int("patience", patience)
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
        self.window = validation.positive_int("window", window)
        self.fraction = validation.open_unit_interval("fraction", fraction)
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
        self.low = validation.in_closed_range("low", low, 0.0, float("inf"))
        self.high = validation.positive_finite("high", high)
        if self.low >= self.high:
            raise ValueError(
                f"`low` must be smaller than `high`. Received: low={low!r}, "
                f"high={high!r}"
            )
        self.steps = validation.non_negative_int("steps", steps)
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
        self.floor = validation.positive_finite("floor", floor)
        self.patience = validation.positive_int("patience", patience)
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


#: The variables the default `VanishingLayersRule` compares: the layers'
#: kernels (Dense, Conv, LSTM's kernel and recurrent kernel, ...), not their
#: biases, normalization scales or embeddings.
KERNELS = r"kernel$"


class VanishingLayersRule(Rule):
    """Warns when some layers get `ratio` times less gradient than others.

    Vanishing gradients are a gap between layers: in a deep stack of
    sigmoid layers each layer passes back at most a quarter of the gradient
    it receives, so the first kernels get 1e-7 of what the last one gets and
    stop learning. The gap needs no model-specific scale, unlike a floor on
    the norm (`VanishingRule`), and it stays wide while the loss falls: a
    healthy run's norms all shrink together. The rule compares the smallest
    positive gradient norm of the selected variables with the largest, at
    each summary. Once the smallest has stayed below `ratio` times the
    largest for `patience` steps (counted from the summary before it first
    fell below, so that summaries every 100 steps fire on their first
    summary after 100 steps of gap), it warns once, naming the variable
    furthest behind; it fires again only after the gap closed. A summary
    with fewer than two positive norms neither extends nor ends the gap.

    At the defaults (1e-5 over 100 steps) a stack of 12 sigmoid layers
    fires at step 100; the query and key kernels of a freshly initialized
    attention layer (about 1e-4 of the others) do not.

    Args:
        ratio: Smallest over largest gradient norm below which the layers
            count as vanishing (0 < ratio < 1).
        patience: Steps the gap must last before the warning.
        subjects: Regex of the variables compared (`re.search`); by
            default the kernels.
        hint: Overrides the default hint.
        metric: Metric to read; default "grad_norm".

    Example:

    >>> rule = VanishingLayersRule()
    >>> norms = {"dense/kernel": 1e-9, "dense_1/kernel": 0.5}
    >>> rule.update(0, norms), rule.update(50, norms)
    ([], [])
    >>> [(a.step, a.subject) for a in rule.update(100, norms)]
    [(100, 'dense/kernel')]
    """

    name = "vanishing_layers"
    default_hint = VanishingRule.default_hint
    comparison = "<"

    def __init__(
        self,
        ratio: float = 1e-5,
        patience: int = 100,
        subjects: str | None = KERNELS,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        self.ratio = validation.open_unit_interval("ratio", ratio)
        self.patience = validation.positive_int("patience", patience)
        self._previous: int | None = None
        self._since: int | None = None
        self._fired = False

    def reset(self) -> None:
        super().reset()
        self._previous = self._since = None
        self._fired = False

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        norms = {subject: value for subject, value in values.items() if value > 0}
        if len(norms) < 2:
            return []
        previous, self._previous = self._previous, step
        low = min(norms, key=norms.__getitem__)
        high = max(norms, key=norms.__getitem__)
        if norms[low] >= self.ratio * norms[high]:
            self._since, self._fired = None, False
            return []
        if self._since is None:
            self._since = step if previous is None else previous
        if self._fired or step - self._since < self.patience:
            return []
        self._fired = True
        return [self._gap(step, low, high, norms)]

    def _gap(self, step: int, low: str, high: str, norms: dict[str, float]) -> Alert:
        gap = norms[low] / norms[high]
        return self._alert(
            step,
            low,
            norms[low],
            self.ratio * norms[high],
            context=(
                f" ({format_number(gap)} of the largest, {high!r} = "
                f"{format_number(norms[high])}, since step {self._since})"
            ),
            details={"ratio": gap, "largest": high, "since_step": self._since},
        )

    def __repr__(self) -> str:
        return (
            f"VanishingLayersRule(ratio={self.ratio!r}, "
            f"patience={self.patience!r}, subjects={self.subjects!r})"
        )
