"""`NonFiniteRule`: any NaN or Inf in the gradients."""

from __future__ import annotations

import math

from keras_gradmon.alerts.base import GRAD_NONFINITE, Rule
from keras_gradmon.alerts.events import CRITICAL, Alert


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
