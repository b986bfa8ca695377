"""`default_rules`: a rule set that is quiet on healthy training."""

from __future__ import annotations

from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.growth import GrowthRule
from keras_gradmon.alerts.nonfinite import NonFiniteRule
from keras_gradmon.alerts.spike import SpikeRule

#: The subject filter of the default growth and spike rules.
GLOBAL_ONLY = r"^global$"


def default_rules() -> dict[str, Rule]:
    """Returns fresh default rules, keyed by name.

    The set catches NaN/Inf gradients in any variable (critical), a 10x
    growth of the global norm within 3 summaries and spikes of about 2.5x or
    more above its recent level, and stays silent on healthy runs whose
    norms fluctuate by +-30% around a slowly moving level. It holds no
    `ThresholdRule` (absolute scales are model-specific) and no
    `VanishingRule` (a legitimate norm can be tiny, or 0 for a variable the
    loss does not reach); add them with values that fit the model.

    Returns:
        {"nonfinite": NonFiniteRule, "growth": GrowthRule, "spike": SpikeRule},
        new objects on every call so engines never share state.

    Example:

    >>> sorted(default_rules())
    ['growth', 'nonfinite', 'spike']
    """
    return {
        "nonfinite": NonFiniteRule(),
        # Growth and spikes on the global norm only: the norm of one small
        # variable (a bias) swings by 10x between minibatches in healthy
        # training. Add rules with `subjects=` for groups or variables.
        "growth": GrowthRule(factor=10.0, window=3, subjects=GLOBAL_ONLY),
        "spike": SpikeRule(
            z_threshold=6.0, decay=0.98, warmup=20, subjects=GLOBAL_ONLY
        ),
    }
