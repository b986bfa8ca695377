"""`AlertEngine`: feeds each summary's metrics to a set of rules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.defaults import default_rules
from keras_gradmon.alerts.events import Alert
from keras_gradmon.alerts.limiter import RateLimiter


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
