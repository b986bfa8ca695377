"""The default activation rules judge each layer against its own recent
level (`keras_gradmon.alerts.activity`): each precondition at its boundary,
fed one summary at a time through an `AlertEngine` as `ActivationMonitor`
runs them (pure Python). The levels they stay silent on are measured on
healthy keras.applications runs (`docs/activations.md`)."""

from __future__ import annotations

import math

import pytest

from keras_gradmon.alerts import (
    AlertEngine,
    CollapseRule,
    DeadUnitsRule,
    default_activation_rules,
)
from keras_gradmon.alerts.activity import ACTIVATION_STD, DEAD_FRACTION


def _feed(metric: str, values: list[float]) -> list[tuple]:
    """(step, rule, tier, value, threshold) of each alert of the default
    rules on `values` of one layer, one summary per step."""
    engine = AlertEngine(default_activation_rules())
    return [
        (a.step, a.rule, a.tier, a.value, a.threshold)
        for step, value in enumerate(values)
        for a in engine.update(step, {metric: {"h": value}})
    ]


# Dead units: the live fraction against its best of the last 5 summaries.


def test_a_layer_dead_by_design_is_silent():
    # Half the units dead from the start, drifting (a squeeze-excite ReLU).
    assert _feed(DEAD_FRACTION, [0.5, 0.55, 0.6, 0.79, 0.6, 0.7]) == []


def test_dead_units_fire_exactly_when_90_percent_of_the_live_units_die():
    # Level: 0.5 alive; 10% of it is 0.05 alive, a dead fraction of 0.95.
    at_edge = 1.0 - 0.05
    fired = _feed(DEAD_FRACTION, [0.5, at_edge])
    assert [(step, tier) for step, _, tier, *_ in fired] == [(1, "warning")]
    assert fired[0][4] == pytest.approx(0.95)
    just_short = math.nextafter(at_edge - 1e-9, 0.0)
    assert _feed(DEAD_FRACTION, [0.5, just_short]) == []


def test_every_unit_dead_fires_at_the_first_summary_and_goes_critical():
    fired = _feed(DEAD_FRACTION, [1.0, 1.0, 1.0])
    assert [(s, r, t) for s, r, t, *_ in fired] == [
        (0, "dead_units", "warning"),
        (1, "dead_units", "critical"),
        (2, "dead_units", "critical"),
    ]


def test_the_level_is_the_last_5_summaries_only():
    # 0.95 dead is 90% of 0.5 alive dying: fires while 0.5 alive is within
    # the last 5 summaries, not once it has left them.
    rule = DeadUnitsRule()
    history = [0.5, 0.8, 0.8, 0.8, 0.8]
    assert [rule.update(s, {"h": v}) for s, v in enumerate(history)] == [[]] * 5
    assert rule.update(5, {"h": 0.95}) != []  # 0.5 still in the window
    rule = DeadUnitsRule()
    for step, value in enumerate([0.5, *history[1:], 0.8]):
        rule.update(step, {"h": value})
    assert rule.update(6, {"h": 0.95}) == []  # best now 0.2 alive; 0.05 > 0.02


def test_a_death_holds_until_the_layer_recovers():
    fired = _feed(DEAD_FRACTION, [0.0, 0.95, 0.95, 0.5, 0.5])
    assert [(s, t) for s, _, t, *_ in fired] == [(1, "warning"), (2, "critical")]


# Collapse: the std against its largest of the last 5 summaries.


def test_a_growing_std_never_fires():
    # BatchNorm's moving statistics warming up: 1e-13 to 0.01.
    assert _feed(ACTIVATION_STD, [10.0 ** -k for k in range(13, 1, -1)]) == []


def test_collapse_fires_exactly_below_a_hundredth_of_the_level():
    edge = 0.01 * 0.4
    assert _feed(ACTIVATION_STD, [0.4, 0.3, edge]) == []
    fired = _feed(ACTIVATION_STD, [0.4, 0.3, math.nextafter(edge, 0.0)])
    assert [(s, r, t) for s, r, t, *_ in fired] == [
        (2, "activation_collapse", "warning")
    ]
    assert fired[0][4] == edge


def test_collapse_to_zero_goes_critical_at_the_second_summary():
    fired = _feed(ACTIVATION_STD, [0.3, 0.0, 0.0, 0.3])
    assert [(s, t) for s, _, t, *_ in fired] == [(1, "warning"), (2, "critical")]


def test_a_layer_whose_std_was_always_zero_is_silent():
    # No level to fall from (float32 rounding of tiny outputs at step 0).
    assert _feed(ACTIVATION_STD, [0.0, 0.0, 1e-9]) == []


@pytest.mark.parametrize(
    ("rule", "argument", "value"),
    [
        (DeadUnitsRule, "fraction", 1.0),
        (DeadUnitsRule, "window", 0),
        (CollapseRule, "ratio", 0.0),
        (CollapseRule, "critical_patience", 0),
    ],
)
def test_bad_options_name_the_argument_and_value(rule, argument, value):
    with pytest.raises(ValueError, match=rf"Received: {argument}={value!r}"):
        rule(**{argument: value})


def test_non_finite_outputs_are_critical_at_once():
    engine = AlertEngine(default_activation_rules())
    (alert,) = engine.update(
        0, {"activation_nonfinite": {"h1": 0.0, "h2": 12.0, "h3": math.nan}}
    )
    assert (alert.rule, alert.tier, alert.details["subjects"]) == (
        "nonfinite",
        "critical",
        ["h2", "h3"],
    )
    assert alert.message.startswith(
        "CRITICAL non-finite activation at step 0: activation_nonfinite = 13 > 0"
    )
