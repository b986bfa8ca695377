"""`Rule`: the behaviour every alert rule shares.

A rule is fed one summary at a time: `update(step, values)` with `values`
mapping each subject ("global", a group, a variable path) to one number. The
base class owns the parts that must be identical across rules:

* Freshness: a step at or before the last processed one is ignored without
  touching any state, so a rule never fires twice on numbers already seen
  (summaries can be re-read, e.g. when a callback runs more often than the
  summaries are refreshed).
* Subject filter: an optional regex, matched with `re.search`.
* Robustness: NaN/Inf values, and values that are not numbers at all, are
  dropped before a rule sees them (non-finite values are the job of
  `NonFiniteRule`, which opts out of that filter). Rules never raise on
  their inputs: a monitoring bug must not stop training.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from keras_gradmon import validation
from keras_gradmon.alerts.events import WARNING, Alert

#: Metric read by the norm-based rules.
GRAD_NORM = "grad_norm"
#: Metric holding per-subject counts of NaN/Inf gradient elements.
GRAD_NONFINITE = "grad_nonfinite"

#: Hint shared by the rules that detect exploding gradients.
EXPLOSION_HINT = (
    "lower the learning rate or enable global-norm clipping "
    "(clipping: {method: global_norm}) in the config"
)


def _as_float(value: Any) -> float | None:
    # Accepts Python numbers, numpy scalars and scalar tensors alike.
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


class Rule(abc.ABC):
    """Base class of the alert rules.

    Subclasses set the class attributes and implement `_evaluate`, which
    receives only fresh steps and only the selected, convertible (and, unless
    `keeps_nonfinite`, finite) values.

    Args:
        subjects: Regex choosing the subjects the rule applies to, matched
            with `re.search`; None applies it to every subject.
        hint: What to try when the rule fires; None uses `default_hint`.
        metric: Which metric the `AlertEngine` feeds this rule; None uses
            `default_metric`.

    Example:

    >>> class Negative(Rule):
    ...     name, default_hint = "negative", "check the sign"
    ...     def _evaluate(self, step, values):
    ...         return [self._alert(step, s, v, 0.0) for s, v in values.items()
    ...                 if v < 0]
    >>> [a.subject for a in Negative().update(1, {"a": -1.0, "b": 2.0})]
    ['a']
    """

    name: ClassVar[str]
    default_hint: ClassVar[str]
    default_metric: ClassVar[str] = GRAD_NORM
    comparison: ClassVar[str] = ">"
    keeps_nonfinite: ClassVar[bool] = False
    #: Other metrics the `AlertEngine` adds to `values`, as subjects
    #: "<metric>/<subject>" (e.g. "spikes/max_step" beside the "skipped"
    #: counts), when the summary has them.
    companions: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        *,
        subjects: str | None = None,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        self.subjects = subjects
        self._pattern = validation.subjects_pattern(subjects)
        self.hint = (
            self.default_hint if hint is None else validation.string("hint", hint)
        )
        self.metric = (
            self.default_metric
            if metric is None
            else validation.non_empty_string("metric", metric)
        )
        self.last_step: int | None = None

    def applies_to(self, subject: str) -> bool:
        """Whether the subject filter selects `subject`."""
        return self._pattern is None or self._pattern.search(subject) is not None

    def update(self, step: int, values: Mapping[str, float]) -> list[Alert]:
        """Feeds one summary to the rule.

        Args:
            step: Training step of the summary.
            values: Subject -> number for that subject at `step`.

        Returns:
            The alerts the summary triggers, possibly none. Always [] for a
            step not after the last processed one (no state changes then).
        """
        step = int(step)
        if self.last_step is not None and step <= self.last_step:
            return []
        selected: dict[str, float] = {}
        for subject, raw in values.items():
            subject = str(subject)
            value = _as_float(raw)
            if value is None or not self.applies_to(subject):
                continue
            if math.isfinite(value) or self.keeps_nonfinite:
                selected[subject] = value
        alerts = self._evaluate(step, selected)
        self.last_step = step
        return alerts

    def reset(self) -> None:
        """Forgets everything seen, e.g. before a new training run.

        Subclasses with state extend this and call `super().reset()`.
        """
        self.last_step = None

    @abc.abstractmethod
    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        """Returns the alerts for a fresh summary of selected values."""

    def _alert(
        self,
        step: int,
        subject: str,
        value: float,
        threshold: float,
        *,
        tier: str = WARNING,
        context: str = "",
        details: Mapping[str, object] | None = None,
        comparison: str | None = None,
        measured: str | None = None,
    ) -> Alert:
        # `measured`: the tag the value comes from when it is not the routed
        # metric itself (e.g. "clip/fraction" of the metric "clip").
        return Alert(
            rule=self.name,
            tier=tier,
            step=step,
            value=value,
            threshold=threshold,
            subject=subject,
            hint=self.hint,
            details=details or {},
            metric=measured or self.metric,
            comparison=comparison or self.comparison,
            context=context,
        )

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(metric={self.metric!r}, subjects={self.subjects!r})"
