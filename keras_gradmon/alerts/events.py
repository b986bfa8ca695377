"""The `Alert` record that every rule emits, and how it reads in a log (the
alerts of a step as a hub hands them to recorders are
`keras_gradmon.alerts.log.AlertBatch`).

An alert is plain data: it is logged as one line (`Alert.message`) and
written to a JSON Lines file (`Alert.to_dict`), so it holds no reference to
the rule that produced it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from keras_gradmon.formatting import format_number

#: Tier of an alert that needs a look but not necessarily action.
WARNING = "warning"
#: Tier of an alert that means training is, or is about to be, broken.
CRITICAL = "critical"
#: The tag statistic of the alert texts in TensorBoard (`alert_log/all`,
#: `alert_log/<scope>/all`): a Markdown table a step in event files
#: (`keras_gradmon.alerts.log`), one JSON object per alert in logs written
#: before it and for recorders without `write_alerts` (`AlertBatch`).
ALERT_LOG = "alert_log"
#: All tiers, least severe first; the index is the severity rank.
TIERS: tuple[str, ...] = (WARNING, CRITICAL)

# How each built-in rule is named in a log line; "{kind}" is "gradient" for
# gradient metrics, else the metric name, so a rule pointed at another metric
# (e.g. "weight_norm") does not claim to be about gradients.
_TITLES = {
    "threshold": "{kind} threshold",
    "vanishing": "vanishing {kind}",
    "nonfinite": "non-finite {kind}",
    "spike": "{kind} spike",
    "growth": "{kind} growth",
    "band": "{kind} out of band",
    "clip_fraction": "clipping fraction",
    "update_ratio": "update/weight ratio out of band",
    "skipped_spike": "spiking step skipped",
    "dead_units": "dead units",
    "activation_collapse": "activation collapse",
}

# How a metric is named in a title where its name would repeat the rule's.
_KINDS = {"activation_nonfinite": "activation"}

# Metrics whose values are gradient norms although their name does not say so.
_GRADIENT_METRICS = ("grad", "spikes/")

# A non-finite alert may name hundreds of variables; the log line shows the
# first few and `details` keeps them all.
_MAX_LISTED_SUBJECTS = 5


def _jsonable(x: Any) -> Any:
    # JSON has no NaN/Inf (strict parsers reject them), so they become strings
    # that keep their meaning; unknown objects fall back to their str().
    if isinstance(x, bool) or x is None or isinstance(x, (str, int)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    if isinstance(x, Mapping):
        return {str(key): _jsonable(value) for key, value in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [_jsonable(item) for item in x]
    try:
        return _jsonable(float(x))
    except (TypeError, ValueError, OverflowError):
        return str(x)


@dataclass(frozen=True)
class Alert:
    """One finding of an alert rule at one summary step.

    Attributes:
        rule: Kind of rule that fired: "threshold", "vanishing", "nonfinite",
            "spike", "growth", "band", or a custom rule's name.
        tier: `WARNING` or `CRITICAL`.
        step: Training step of the summary the alert is about.
        value: The measured number, in the metric's units (a norm, or for
            "nonfinite" the total count of NaN/Inf elements).
        threshold: The number `value` was compared with, in the same units.
        subject: What was measured: "global", a group name or a variable
            path. For "nonfinite" the subject with the largest count.
        hint: What to try, in a few words.
        details: Rule-specific machine-readable data (z-score, streak
            length, ...). When `details["subjects"]` is a non-empty list
            (the non-finite rule), the message names those subjects and
            `value` is their total.
        metric: The metric the value was read from, e.g. "grad_norm".
        comparison: How `value` relates to `threshold`: ">", ">=" or "<".
        context: Extra words for the log line, e.g. " for 3 consecutive
            summaries"; starts with a space when not empty.
        note: Set by `RateLimiter` on the last alert it lets through for a
            rule and tier, to say that further ones are suppressed.

    Example:

    >>> alert = Alert("threshold", CRITICAL, 300, 826256.0, 50000.0,
    ...               "actor_cnn", "lower the learning rate")
    >>> alert.message
    "CRITICAL gradient threshold at step 300: grad_norm of 'actor_cnn' = 826,256 > 50,000. Hint: lower the learning rate."
    """  # noqa: E501

    rule: str
    tier: str
    step: int
    value: float
    threshold: float
    subject: str
    hint: str = ""
    details: Mapping[str, object] = field(default_factory=dict, hash=False)
    metric: str = "grad_norm"
    comparison: str = ">"
    context: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(
                f"`tier` must be one of {TIERS}. Received: tier={self.tier!r}"
            )
        # A private copy, so mutating the caller's dict later cannot change a
        # recorded alert.
        object.__setattr__(self, "details", dict(self.details))

    @property
    def title(self) -> str:
        """How the rule is named in the log line, e.g. "gradient threshold"."""
        kind = "gradient" if self.metric.startswith(_GRADIENT_METRICS) else self.metric
        kind = _KINDS.get(kind, kind)
        template = _TITLES.get(self.rule, "{kind} " + self.rule)
        return template.format(kind=kind)

    @property
    def hint_sentence(self) -> str:
        """" Hint: <hint>." as the log line ends with it; "" without one."""
        if not self.hint:
            return ""
        end = "" if self.hint.endswith((".", "!", "?")) else "."
        return f" Hint: {self.hint}{end}"

    @property
    def message(self) -> str:
        """The alert as one readable log line (no newline)."""
        comparison = (
            f"{format_number(self.value)} {self.comparison} "
            f"{format_number(self.threshold)}"
        )
        listed = self.details.get("subjects")
        if isinstance(listed, (list, tuple)) and listed:
            measured = f"{self.metric} = {comparison} in {self._listing(listed)}"
        else:
            measured = f"{self.metric} of {self.subject!r} = {comparison}"
        line = f"{self.tier.upper()} {self.title} at step {self.step}: "
        line += measured + self.context + "." + self.hint_sentence
        if self.note:
            line += f" [{self.note}]"
        return line

    def _listing(self, subjects: list[Any] | tuple[Any, ...]) -> str:
        counts = self.details.get("counts")
        counts = counts if isinstance(counts, Mapping) else {}
        shown = []
        for subject in subjects[:_MAX_LISTED_SUBJECTS]:
            count = counts.get(subject)
            suffix = f" ({format_number(float(count))})" if count is not None else ""
            shown.append(f"{subject!r}{suffix}")
        text = ", ".join(shown)
        if len(subjects) > _MAX_LISTED_SUBJECTS:
            text += f" and {len(subjects) - _MAX_LISTED_SUBJECTS} more"
        noun = "subject" if len(subjects) == 1 else "subjects"
        return f"{len(subjects)} {noun}: {text}"

    def to_dict(self) -> dict[str, Any]:
        """The alert as JSON-serializable data, one JSON Lines record.

        Non-finite floats become the strings "nan", "inf" and "-inf", so
        `json.dumps(alert.to_dict(), allow_nan=False)` always works.

        Returns:
            A dict with every field plus the rendered `message`.

        Example:

        >>> Alert("spike", WARNING, 7, 3.5, 2.0, "global").to_dict()["tier"]
        'warning'
        """
        data = {
            "rule": self.rule,
            "tier": self.tier,
            "step": self.step,
            "value": self.value,
            "threshold": self.threshold,
            "subject": self.subject,
            "metric": self.metric,
            "comparison": self.comparison,
            "hint": self.hint,
            "details": self.details,
            "note": self.note,
            "message": self.message,
        }
        return _jsonable(data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Alert:
        """The alert of a `to_dict` record (e.g. read back from an event
        file): "nan" and "inf" strings become floats again; the "message"
        (derived) and unknown keys are not read, and `context` (not written)
        stays empty.

        Raises:
            KeyError, TypeError, ValueError: `data` lacks a rule, tier, step,
                value, threshold or subject, or holds one that does not fit.

        Example:

        >>> alert = Alert("nonfinite", CRITICAL, 7, math.inf, 0.0, "global")
        >>> Alert.from_dict(alert.to_dict()) == alert
        True
        """
        fields = {"hint", "details", "metric", "comparison", "note"}
        return cls(
            rule=str(data["rule"]),
            tier=str(data["tier"]),
            step=int(data["step"]),
            value=float(data["value"]),
            threshold=float(data["threshold"]),
            subject=str(data["subject"]),
            **{key: data[key] for key in fields if key in data},
        )
