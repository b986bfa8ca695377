"""Alert rules over the gradient statistics of successive summaries.

Pure Python (no TensorFlow): rules receive one number per subject per
summary step and return `Alert` records; `AlertEngine` routes metrics to
rules, `RateLimiter` thins out repeats and `IncidentLog` groups the log
lines into incidents.

Example:

>>> from keras_gradmon.alerts import AlertEngine, ThresholdRule
>>> engine = AlertEngine([ThresholdRule(warning=10_000, critical=50_000)])
>>> for step, norm in [(100, 5_191.0), (200, 130_486.0), (300, 826_256.0)]:
...     for alert in engine.update(step, {"grad_norm": {"global": norm}}):
...         print(alert.step, alert.tier)
200 warning
300 critical
"""

from keras_gradmon.alerts.activity import CollapseRule, DeadUnitsRule
from keras_gradmon.alerts.base import (
    EXPLOSION_HINT,
    GRAD_NONFINITE,
    GRAD_NORM,
    Rule,
)
from keras_gradmon.alerts.defaults import (
    default_activation_rules,
    default_rules,
)
from keras_gradmon.alerts.engine import AlertEngine, RateLimiter
from keras_gradmon.alerts.events import CRITICAL, TIERS, WARNING, Alert
from keras_gradmon.alerts.incidents import IncidentLog
from keras_gradmon.alerts.rules import (
    BandRule,
    ClipFractionRule,
    NonFiniteRule,
    ThresholdRule,
    UpdateRatioRule,
    VanishingLayersRule,
    VanishingRule,
)
from keras_gradmon.alerts.scale import (
    GrowthRule,
    IntervalSpikeRule,
    SkippedSpikeRule,
    SpikeRule,
)
from keras_gradmon.formatting import format_number

__all__ = [
    "CRITICAL",
    "EXPLOSION_HINT",
    "GRAD_NONFINITE",
    "GRAD_NORM",
    "TIERS",
    "WARNING",
    "Alert",
    "AlertEngine",
    "BandRule",
    "ClipFractionRule",
    "CollapseRule",
    "DeadUnitsRule",
    "GrowthRule",
    "IncidentLog",
    "IntervalSpikeRule",
    "NonFiniteRule",
    "RateLimiter",
    "Rule",
    "SkippedSpikeRule",
    "SpikeRule",
    "ThresholdRule",
    "UpdateRatioRule",
    "VanishingLayersRule",
    "VanishingRule",
    "default_activation_rules",
    "default_rules",
    "format_number",
]
