"""Each fixed-level activation rule (opt-in: `std_band`, `dead_fraction`)
fires exactly where its documentation says: `default_activation_rules`
through an `AlertEngine`, as `ActivationMonitor` runs them, fed one summary
at a time (pure Python). The rules of each layer's own level, on by
default, are `tests/alerts/test_own_level_rules.py`."""

from __future__ import annotations

import math

import pytest

from keras_gradmon import defaults
from keras_gradmon.alerts import AlertEngine, default_activation_rules
from keras_gradmon.alerts.defaults import ACTIVATION_STD, DEAD_FRACTION

LOW, HIGH = defaults.STD_BAND


def _fixed(std_band=defaults.STD_BAND, dead_fraction=defaults.DEAD_FRACTION):
    """The fixed-level rules alone, at the levels given."""
    rules = default_activation_rules(std_band, dead_fraction)
    return {k: v for k, v in rules.items() if k in ("activation_std", "dead_fraction")}


def _feed(metric: str, values: list[float], **rule_options) -> list[tuple]:
    """(step, tier, comparison, threshold) of each alert of the fixed-level
    rules on `values` of one layer, one summary per step."""
    engine = AlertEngine(_fixed(**rule_options))
    fired = []
    for step, value in enumerate(values):
        for alert in engine.update(step, {metric: {"h": value}}):
            fired.append((alert.step, alert.tier, alert.comparison, alert.threshold))
    return fired


@pytest.mark.parametrize(
    "value", [LOW, HIGH, math.sqrt(LOW * HIGH), math.nextafter(LOW, HIGH)]
)
def test_std_band_edges_are_healthy(value):
    assert _feed(ACTIVATION_STD, [value] * 10) == []


@pytest.mark.parametrize(
    ("value", "comparison", "edge"),
    [
        (math.nextafter(LOW, 0.0), "<", LOW),
        (0.0, "<", LOW),  # a dead layer's std
        (math.nextafter(HIGH, math.inf), ">", HIGH),
    ],
)
def test_std_band_fires_at_the_third_summary_out_of_band(value, comparison, edge):
    # Two summaries out of band, one back in: silent (one short).
    assert _feed(ACTIVATION_STD, [value, value, 1.0, value, value]) == []
    # Three in a row: one warning, on the third, once per excursion.
    fired = _feed(ACTIVATION_STD, [value] * 8)
    assert fired == [(2, "warning", comparison, edge)]


def test_std_band_rearms_after_the_std_came_back():
    out = math.nextafter(LOW, 0.0)
    values = [out] * 3 + [LOW] + [out] * 3
    assert [step for step, *_ in _feed(ACTIVATION_STD, values)] == [2, 6]


@pytest.mark.parametrize("value", [0.0, defaults.DEAD_FRACTION])
def test_dead_units_up_to_the_fraction_are_healthy(value):
    assert _feed(DEAD_FRACTION, [value] * 5) == []


def test_dead_units_warn_above_the_fraction_at_every_summary():
    value = math.nextafter(defaults.DEAD_FRACTION, 1.0)
    assert _feed(DEAD_FRACTION, [value] * 3) == [
        (step, "warning", ">", defaults.DEAD_FRACTION) for step in range(3)
    ]


def test_dead_units_exactly_90_percent_never_go_critical():
    assert {tier for _, tier, *_ in _feed(DEAD_FRACTION, [0.9] * 5)} == {"warning"}


def test_dead_units_critical_exactly_at_the_second_summary_above_90_percent():
    above = math.nextafter(0.9, 1.0)
    fired = _feed(DEAD_FRACTION, [above, above, above])
    assert fired == [
        (0, "warning", ">", defaults.DEAD_FRACTION),  # critical pending
        (1, "critical", ">", 0.9),
        (2, "critical", ">", 0.9),
    ]


def test_dead_units_critical_needs_two_summaries_in_a_row():
    above = math.nextafter(0.9, 1.0)
    tiers = [tier for _, tier, *_ in _feed(DEAD_FRACTION, [above, 0.9, above, 1.0])]
    assert tiers == ["warning", "warning", "warning", "critical"]


def test_dead_units_streak_is_per_layer_and_survives_a_missing_summary():
    engine = AlertEngine(_fixed())
    summaries = [{"a": 1.0}, {"b": 1.0}, {"a": 1.0, "b": math.nan}, {"b": 1.0}]
    fired = [
        (alert.step, alert.subject, alert.tier)
        for step, values in enumerate(summaries)
        for alert in engine.update(step, {DEAD_FRACTION: values})
    ]
    assert fired == [
        (0, "a", "warning"),
        (1, "b", "warning"),
        (2, "a", "critical"),
        (3, "b", "critical"),
    ]


def test_a_dead_fraction_of_90_percent_or_more_has_no_critical_tier():
    fired = _feed(DEAD_FRACTION, [1.0] * 4, dead_fraction=0.9)
    assert fired == [(step, "warning", ">", 0.9) for step in range(4)]


def test_a_std_band_must_have_a_positive_low_edge():
    with pytest.raises(ValueError) as error:
        default_activation_rules(std_band=(0.0, 2.0))
    assert str(error.value) == (
        "`std_band` must be a pair (low, high) of finite numbers with "
        "0 < low < high (`low` must be a positive finite number. Received: "
        "low=0.0). Received: std_band=(0.0, 2.0)"
    )
