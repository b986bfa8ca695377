"""`default_rules`: a rule set that is quiet on healthy training."""

from __future__ import annotations

from keras_gradmon import validation
from keras_gradmon.alerts.activity import (
    ACTIVATION_NONFINITE,
    ACTIVATION_STD,
    DEAD_FRACTION,
    DEAD_UNITS_HINT,
    NONFINITE_ACTIVATIONS_HINT,
    CollapseRule,
    DeadUnitsRule,
)
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.rules import (
    BandRule,
    ClipFractionRule,
    NonFiniteRule,
    ThresholdRule,
    UpdateRatioRule,
    VanishingLayersRule,
)
from keras_gradmon.alerts.scale import (
    GrowthRule,
    IntervalSpikeRule,
    SkippedSpikeRule,
    SpikeRule,
)

#: The subject filter of the default growth and spike rules.
GLOBAL_ONLY = r"^global$"


def default_rules() -> dict[str, Rule]:
    """Returns fresh default rules, keyed by name.

    The set catches NaN/Inf gradients in any variable (critical), a global
    norm 10 times its level (the median of its last 1,000 steps) and spikes
    of 2.5x or more above that level (more for a noisy norm: 6 standard
    deviations of its log), and stays silent on healthy runs, noisy ones
    included. Windows and warm-ups are in steps, so the rules mean the same
    at every summary frequency. It holds no
    `ThresholdRule` (absolute scales are model-specific) and no
    `VanishingRule` (a legitimate norm can be tiny, or 0 for a variable the
    loss does not reach); add them with values that fit the model.

    The rules of the signals a monitor writes only when asked stay silent
    without them: spikes between summaries (`track_spikes`, the same z-score
    as the spike rule), steps skipped as spikes (`skip_spikes`), more than
    half of the last 1,000 steps clipped (clipping on) and an update/weight
    ratio outside 1e-7 to 1e-1 for 1,000 steps (`update_statistics`).

    Returns:
        {"nonfinite": NonFiniteRule, "growth": GrowthRule, "spike": SpikeRule,
        "interval_spike": IntervalSpikeRule, "skipped_spike": SkippedSpikeRule,
        "clip_fraction": ClipFractionRule, "update_ratio": UpdateRatioRule},
        new objects on every call so engines never share state.

    Example:

    >>> sorted(default_rules())[:4]
    ['clip_fraction', 'growth', 'interval_spike', 'nonfinite']
    """
    return {
        "nonfinite": NonFiniteRule(),
        # Growth and spikes on the global norm only: the norm of one small
        # variable (a bias) swings by 10x between minibatches in healthy
        # training. Add rules with `subjects=` for groups or variables.
        "growth": GrowthRule(
            factor=10.0, window=1000, warmup=100, subjects=GLOBAL_ONLY
        ),
        "spike": SpikeRule(
            z_threshold=6.0, window=1000, warmup=100, subjects=GLOBAL_ONLY
        ),
        "vanishing_layers": VanishingLayersRule(ratio=1e-5, patience=100),
        "interval_spike": IntervalSpikeRule(z_threshold=6.0, window=1000, warmup=100),
        "skipped_spike": SkippedSpikeRule(),
        "clip_fraction": ClipFractionRule(window=1000, fraction=0.5),
        "update_ratio": UpdateRatioRule(low=1e-7, high=1e-1, steps=1000),
    }


_DEAD_CRITICAL = 0.9


def default_activation_rules(
    std_band: tuple[float, float] | None = None,
    dead_fraction: float | None = None,
) -> dict[str, Rule]:
    """Returns fresh activation health rules, keyed by name.

    Each layer is judged against its own recent level, the only judgement
    that holds on real architectures probed in inference mode
    (`keras_gradmon.alerts.activity`; `docs/activations.md`):
    "dead_units" (`DeadUnitsRule`), "activation_collapse" (`CollapseRule`)
    and "activation_nonfinite" (`NonFiniteRule`: NaN or Inf outputs). The
    fixed levels of earlier releases are opt-in.

    Args:
        std_band: `(low, high)` band of a layer's activation std outside
            which to warn (rule "activation_std"); None for none.
        dead_fraction: Warn when more than this fraction of a layer's units
            are dead, at every summary (rule "dead_fraction"; critical from
            the 2nd summary in a row with more than 90% dead; no critical
            tier for a `dead_fraction` of 0.9 or more); None for none.

    Raises:
        ValueError: A band that is not `0 < low < high`, or a dead fraction
            outside (0, 1).

    Example:

    >>> sorted(default_activation_rules())
    ['activation_collapse', 'activation_nonfinite', 'dead_units']
    >>> sorted(default_activation_rules(std_band=(0.05, 20), dead_fraction=0.25))[1:3]
    ['activation_nonfinite', 'activation_std']
    """
    rules: dict[str, Rule] = {
        "dead_units": DeadUnitsRule(),
        "activation_collapse": CollapseRule(),
        "activation_nonfinite": NonFiniteRule(
            metric=ACTIVATION_NONFINITE, hint=NONFINITE_ACTIVATIONS_HINT
        ),
    }
    if std_band is not None:
        rules["activation_std"] = _std_band_rule(std_band)
    if dead_fraction is not None:
        warning = validation.open_unit_interval("dead_fraction", dead_fraction)
        rules["dead_fraction"] = ThresholdRule(
            warning=warning,
            critical=_DEAD_CRITICAL if warning < _DEAD_CRITICAL else None,
            metric=DEAD_FRACTION,
            hint=DEAD_UNITS_HINT,
        )
    return dict(sorted(rules.items()))


def _std_band_rule(std_band: object) -> BandRule:
    """The band rule on the activation std; a clear error for a band that
    is not a pair `0 < low < high` of finite numbers."""
    if not (isinstance(std_band, (tuple, list)) and len(std_band) == 2):
        raise ValueError(
            "`std_band` must be None or a pair (low, high). "
            f"Received: std_band={std_band!r}"
        )
    try:
        return BandRule(*std_band, metric=ACTIVATION_STD)
    except ValueError as error:
        raise ValueError(
            "`std_band` must be a pair (low, high) of finite numbers with "
            f"0 < low < high ({error}). Received: std_band={std_band!r}"
        ) from None
