"""Alert rules over RL training health, on the shared alert machinery.

Pure Python: `RLHealthMonitor` feeds each summary's numbers to an
`AlertEngine` holding these rules, and delivers what fires with
`AlertDelivery` (log line, `alerts/rl/<rule>` flags, `alert_log/rl/all`
texts for `keras-gradmon report --fail-on`, tier actions).

Example:

>>> engine = AlertEngine(default_rl_rules())
>>> alerts = engine.update(1000, {"training intensity": {"replay": 0.5}})
>>> alerts = engine.update(2000, {"training intensity": {"replay": 0.5}})
>>> alerts[0].message.split(":")[0]
'WARNING training intensity low at step 2000'
"""

from __future__ import annotations

from collections import deque

from keras_gradmon import _validation
from keras_gradmon.alerts import AlertEngine
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import Alert, format_number
from keras_gradmon.rl.progress_rules import (
    INTENSITY,
    RETURN,
    THROUGHPUT,
    LowIntensityRule,
    ReturnCollapseRule,
    ThroughputDropRule,
)
from keras_gradmon.rl.streak import StreakRule

#: The metrics the rules read, each `{subject: value}` at a summary.
ENTROPY = "entropy"  # {"collect_policy": entropy / ln(number of actions)}
VALUE_RATIO = "value/return"  # {"start_states": estimate / realized return}


class EntropyCollapseRule(Rule):
    """Warns when the policy's entropy falls fast: below `fraction` of the
    highest value it had within the last `window` steps.

    The value is the entropy as a fraction of its maximum, ln(number of
    actions), so the rule reads the same for any action count. A planned,
    slow epsilon decay stays quiet; a policy that stops exploring within
    `window` steps does not. The value itself is in the window, so a first
    value (its own peak) never fires; it fires at each summary below.

    Args:
        fraction: Fires below this fraction of the window's maximum (0, 1).
        window: Steps the maximum is taken over (summaries in
            `(step - window, step]`).

    Example:

    >>> rule = EntropyCollapseRule(fraction=0.25, window=1000)
    >>> rule.update(0, {"collect_policy": 0.9}), rule.update(1500, {"collect_policy": 0.3})
    ([], [])
    >>> [a.tier for a in rule.update(2000, {"collect_policy": 0.05})]
    ['warning']
    """  # noqa: E501

    name = "collapse"
    default_metric = ENTROPY
    comparison = "<"
    default_hint = (
        "exploration is ending: decay epsilon more slowly, or raise the "
        "entropy bonus (entropy_regularization, SAC's target entropy)"
    )

    def __init__(self, fraction: float = 0.25, window: int = 10_000) -> None:
        super().__init__()
        self.fraction = _validation.open_unit_interval("fraction", fraction)
        self.window = _validation.positive_int("window", window)
        self._seen: dict[str, deque[tuple[int, float]]] = {}

    def reset(self) -> None:
        super().reset()
        self._seen.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            seen = self._seen.setdefault(subject, deque())
            seen.append((step, value))
            while seen[0][0] <= step - self.window:
                seen.popleft()
            peak_step, peak = max(seen, key=lambda point: point[1])
            if peak > 0 and value < self.fraction * peak:
                alerts.append(
                    self._alert(
                        step,
                        subject,
                        value,
                        self.fraction * peak,
                        context=(
                            f" (down from {format_number(peak)} at step "
                            f"{peak_step}, within {self.window} steps)"
                        ),
                        details={"peak": peak, "peak_step": peak_step},
                    )
                )
        return alerts


class OverestimationRule(StreakRule):
    """Warns when the value estimate exceeds the realized return `ratio`
    times over for `patience` consecutive summaries spanning `steps` steps
    (see `StreakRule`: the ratio is measured once an episode is complete
    and while the realized return is positive).

    Early in training the estimate at the start states runs ahead of
    returns realized by older, worse policies; `patience` summaries in a
    row separate a lasting overestimation from that lag.

    Args:
        ratio: Estimate / realized return above which it fires (> 1).
        patience: Consecutive summaries above `ratio` before it fires.
        steps: Steps those summaries must span (the default rules: 2,000).

    Example:

    >>> rule = OverestimationRule(ratio=2.0, patience=2)
    >>> rule.update(5, {"start_states": 2.5})
    []
    >>> [a.tier for a in rule.update(6, {"start_states": 2.6})]
    ['warning']
    """

    name = "overestimation"
    default_metric = VALUE_RATIO
    default_hint = (
        "the value estimate runs away from the returns: use double Q-learning "
        "(DdqnAgent, TD3's twin critics), update the target network more "
        "slowly, or lower the learning rate"
    )

    def __init__(
        self, ratio: float = 2.0, patience: int = 3, steps: int = 0
    ) -> None:
        super().__init__(patience, steps)
        self.ratio = _validation.greater_than_one("ratio", ratio)

    @property
    def limit(self) -> float:
        return self.ratio

    def breached(self, value: float) -> bool:
        return value > self.ratio


def default_rl_rules() -> dict[str, Rule]:
    """Fresh RL rules, keyed by the name of their `alerts/rl/<name>` flag.

    The streaks are in steps as well as summaries, so the rules mean the
    same at every summary frequency: at the RL monitor's default (a summary
    every 1,000 steps) 2 and 3 summaries in a row span 1,000 and 2,000
    steps, which is what the rules ask for at any frequency.

    Example:

    >>> sorted(default_rl_rules())  # doctest: +NORMALIZE_WHITESPACE
    ['entropy_collapse', 'low_intensity', 'return_collapse', 'throughput_drop',
     'value_overestimation']
    """
    return {
        "entropy_collapse": EntropyCollapseRule(),
        "value_overestimation": OverestimationRule(patience=3, steps=2000),
        "low_intensity": LowIntensityRule(patience=2, steps=1000),
        "return_collapse": ReturnCollapseRule(),
        "throughput_drop": ThroughputDropRule(patience=2, steps=1000),
    }


__all__ = [
    "ENTROPY",
    "INTENSITY",
    "RETURN",
    "THROUGHPUT",
    "VALUE_RATIO",
    "AlertEngine",
    "EntropyCollapseRule",
    "LowIntensityRule",
    "OverestimationRule",
    "ReturnCollapseRule",
    "ThroughputDropRule",
    "default_rl_rules",
]
