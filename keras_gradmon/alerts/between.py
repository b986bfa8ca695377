"""What happened between two summaries: a gradient spike seen only in
`spikes/max_norm` (`IntervalSpikeRule`), a spiking step that `skip_spikes`
skipped (`SkippedSpikeRule`)."""

from __future__ import annotations

import dataclasses

from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import Alert
from keras_gradmon.alerts.spike import SpikeRule
from keras_gradmon.tag_parsing import GLOBAL

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
