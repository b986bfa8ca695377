"""`AlertEngine`: feeds each summary's metrics to a set of rules, and
`RateLimiter`, which decides which alerts are worth emitting again.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from keras_gradmon import validation
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.defaults import default_rules
from keras_gradmon.alerts.events import TIERS, Alert


class RateLimiter:
    """Thins out repeated alerts so a log stays readable.

    Rules report on every summary a condition holds; the limiter decides
    which of those reports are news:

    * Cooldown: an alert is suppressed if the same (rule, tier, subject)
      was emitted less than `cooldown_steps` steps earlier. A warning is
      also suppressed while a critical of the same (rule, subject) is
      cooling down (it says less than the critical did), but a critical
      always passes a warning's cooldown: escalation is news.
    * Cap: at most `max_per_rule` alerts are emitted per rule and tier over
      the limiter's lifetime. The cap counts tiers separately so warnings
      can never use up the budget of a later critical. The last alert let
      through carries a `note` saying that further ones are suppressed.

    Suppressed alerts are counted in `suppressed` and `suppressed_by_rule`.
    A step earlier than the last emission (a restarted run) counts as past
    the cooldown.

    Args:
        cooldown_steps: Steps during which a repeat is suppressed; 0 lets
            every repeat through.
        max_per_rule: Cap per rule and tier, or None for no cap.

    Example:

    >>> from keras_gradmon.alerts.events import CRITICAL, WARNING
    >>> limiter = RateLimiter(cooldown_steps=500)
    >>> def alert(step, tier):
    ...     return Alert("threshold", tier, step, 2.0, 1.0, "global")
    >>> [a.step for a in limiter.filter([alert(100, WARNING)])]
    [100]
    >>> limiter.filter([alert(200, WARNING)]), limiter.suppressed
    ([], 1)
    >>> [a.tier for a in limiter.filter([alert(300, CRITICAL)])]
    ['critical']
    """

    def __init__(self, cooldown_steps: int = 0, max_per_rule: int | None = None):
        self.cooldown_steps = validation.non_negative_int(
            "cooldown_steps", cooldown_steps
        )
        self.max_per_rule = (
            None
            if max_per_rule is None
            else validation.positive_int("max_per_rule", max_per_rule)
        )
        self._last_emitted: dict[tuple[str, str, str], int] = {}
        self._emitted: Counter[tuple[str, str]] = Counter()
        self.suppressed_by_rule: Counter[str] = Counter()

    @property
    def suppressed(self) -> int:
        """How many alerts have been suppressed so far, over all rules."""
        return sum(self.suppressed_by_rule.values())

    def filter(self, alerts: Iterable[Alert]) -> list[Alert]:
        """Returns the alerts worth emitting, in order, and records them.

        Args:
            alerts: Candidate alerts, usually those of one summary step.

        Returns:
            The alerts that pass; the one that reaches a rule's cap comes
            back with its `note` set.
        """
        passed = []
        for alert in alerts:
            if self._cooling_down(alert) or self._capped(alert):
                self.suppressed_by_rule[alert.rule] += 1
                continue
            self._last_emitted[(alert.rule, alert.tier, alert.subject)] = alert.step
            self._emitted[(alert.rule, alert.tier)] += 1
            if self._emitted[(alert.rule, alert.tier)] == self.max_per_rule:
                alert = dataclasses.replace(
                    alert,
                    note=(
                        f"last {alert.rule} {alert.tier}: further ones are "
                        f"suppressed (max_per_rule={self.max_per_rule})"
                    ),
                )
            passed.append(alert)
        return passed

    def reset(self) -> None:
        """Forgets all emissions and counts, e.g. before a new run."""
        self._last_emitted.clear()
        self._emitted.clear()
        self.suppressed_by_rule.clear()

    def _cooling_down(self, alert: Alert) -> bool:
        # Tiers at or above the alert's own: a critical ignores warnings.
        for tier in TIERS[TIERS.index(alert.tier) :]:
            last = self._last_emitted.get((alert.rule, tier, alert.subject))
            if last is not None and last <= alert.step < last + self.cooldown_steps:
                return True
        return False

    def _capped(self, alert: Alert) -> bool:
        return (
            self.max_per_rule is not None
            and self._emitted[(alert.rule, alert.tier)] >= self.max_per_rule
        )

    def __repr__(self) -> str:
        return (
            f"RateLimiter(cooldown_steps={self.cooldown_steps!r}, "
            f"max_per_rule={self.max_per_rule!r})"
        )


def _named_rules(rules: Mapping[str, Rule] | Sequence[Rule]) -> dict[str, Rule]:
    if isinstance(rules, Mapping):
        named = dict(rules)
    elif isinstance(rules, Sequence) and not isinstance(rules, str):
        # Several rules of one kind (e.g. a threshold per group) get
        # "threshold", "threshold_2", ...
        named = {}
        for rule in rules:
            base = getattr(rule, "name", type(rule).__name__)
            name, index = base, 1
            while name in named:
                index += 1
                name = f"{base}_{index}"
            named[name] = rule
    else:
        raise ValueError(
            "`rules` must be a mapping of names to rules or a sequence of "
            f"rules. Received: rules={rules!r}"
        )
    for name, rule in named.items():
        if not isinstance(name, str) or not isinstance(rule, Rule):
            raise ValueError(
                "`rules` must hold `Rule` objects under string names. "
                f"Received: rules={rules!r}"
            )
    return named


def _with_companions(
    rule: Rule,
    values: Mapping[str, float],
    metrics: Mapping[str, Mapping[str, float]],
) -> Mapping[str, float]:
    """`values`, plus each of the rule's companion metrics as subjects
    "<metric>/<subject>"."""
    if not rule.companions:
        return values
    joined = dict(values)
    for companion in rule.companions:
        for subject, value in metrics.get(companion, {}).items():
            joined[f"{companion}/{subject}"] = value
    return joined


class AlertEngine:
    """Runs alert rules over the metrics of each fresh summary.

    Each rule reads one metric, named by its `metric` attribute
    ("grad_norm", "grad_nonfinite", ...); a rule whose metric is missing
    from a summary is skipped for that summary. Alerts of all rules go
    through the optional `RateLimiter` and are kept in `history`.

    Args:
        rules: Rules by name, or a sequence of rules (named after their
            kind); None uses `default_rules()`.
        limiter: Thins out repeats; None emits every alert.

    Example:

    >>> engine = AlertEngine()
    >>> engine.update(100, {"grad_norm": {"global": 5_191.0}})
    []
    >>> alerts = engine.update(200, {"grad_norm": {"global": 130_486.0}})
    >>> [(a.rule, a.tier) for a in alerts]
    [('growth', 'warning')]
    """

    def __init__(
        self,
        rules: Mapping[str, Rule] | Sequence[Rule] | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.rules = _named_rules(default_rules() if rules is None else rules)
        if limiter is not None and not isinstance(limiter, RateLimiter):
            raise ValueError(
                "`limiter` must be a RateLimiter or None. "
                f"Received: limiter={limiter!r}"
            )
        self.limiter = limiter
        self.history: list[Alert] = []
        #: Names of the rules whose condition held at the last update (before
        #: rate limiting): what a 0/1 flag per rule shows.
        self.fired: set[str] = set()

    def update(
        self, step: int, metrics: Mapping[str, Mapping[str, float]]
    ) -> list[Alert]:
        """Feeds one summary to every rule.

        Args:
            step: Training step of the summary.
            metrics: Metric name -> (subject -> value), e.g.
                `{"grad_norm": {"global": 3.2}, "grad_nonfinite": {...}}`.

        Returns:
            The alerts emitted for this step, in rule order.
        """
        alerts: list[Alert] = []
        self.fired = set()
        for name, rule in self.rules.items():
            values = metrics.get(rule.metric)
            if values is not None:
                found = rule.update(step, _with_companions(rule, values, metrics))
                if found:
                    self.fired.add(name)
                alerts.extend(found)
        if self.limiter is not None:
            alerts = self.limiter.filter(alerts)
        self.history.extend(alerts)
        return alerts

    def reset(self) -> None:
        """Resets every rule, the limiter and the history."""
        for rule in self.rules.values():
            rule.reset()
        if self.limiter is not None:
            self.limiter.reset()
        self.history.clear()

    def __repr__(self) -> str:
        return f"AlertEngine(rules={self.rules!r}, limiter={self.limiter!r})"
