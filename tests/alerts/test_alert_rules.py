"""Tests of each alert rule on synthetic sequences."""

from __future__ import annotations

import copy
import math

import pytest

from keras_gradmon.alerts import (
    CRITICAL,
    EXPLOSION_HINT,
    WARNING,
    GrowthRule,
    NonFiniteRule,
    SpikeRule,
    ThresholdRule,
    VanishingRule,
)

# Global gradient norm of a run that blew up (steps 100, 200, 300).
EXPLOSION = [(100, 5_191.0), (200, 130_486.0), (300, 826_256.0)]


def feed(rule, sequence, subject="global"):
    return [rule.update(step, {subject: value}) for step, value in sequence]


def summary(alerts):
    return [(a.rule, a.tier, a.step, a.value, a.threshold, a.subject) for a in alerts]


# --- ThresholdRule -----------------------------------------------------------


def test_threshold_explosion_warns_then_goes_critical():
    rule = ThresholdRule(warning=10_000, critical=50_000)
    first, second, third = feed(rule, EXPLOSION, "actor_cnn")
    assert first == []
    assert summary(second) == [
        ("threshold", WARNING, 200, 130_486.0, 10_000.0, "actor_cnn")
    ]
    assert summary(third) == [
        ("threshold", CRITICAL, 300, 826_256.0, 50_000.0, "actor_cnn")
    ]
    assert second[0].details["critical_streak"] == 1
    assert third[0].details["critical_streak"] == 2
    assert third[0].hint == EXPLOSION_HINT
    assert third[0].message.startswith(
        "CRITICAL gradient threshold at step 300: grad_norm of 'actor_cnn' = "
        "826,256 > 50,000 for 2 consecutive summaries. Hint: lower the"
    )
    assert "(critical once above 50,000 for 2 consecutive summaries; 1 so far)" in (
        second[0].message
    )


def test_threshold_patience_one_is_critical_at_once():
    rule = ThresholdRule(warning=10_000, critical=50_000, critical_patience=1)
    results = feed(rule, EXPLOSION, "actor_cnn")
    assert [[a.tier for a in r] for r in results] == [[], [CRITICAL], [CRITICAL]]
    assert results[2][0].message == (
        "CRITICAL gradient threshold at step 300: grad_norm of 'actor_cnn' = "
        "826,256 > 50,000. Hint: lower the learning rate or enable global-norm "
        "clipping (clipping: {method: global_norm}) in the config."
    )


def test_threshold_critical_only_warns_against_critical_while_pending():
    results = feed(ThresholdRule(critical=50_000), EXPLOSION)
    assert [summary(r) for r in results] == [
        [],
        [("threshold", WARNING, 200, 130_486.0, 50_000.0, "global")],
        [("threshold", CRITICAL, 300, 826_256.0, 50_000.0, "global")],
    ]


def test_threshold_warning_only_never_goes_critical():
    results = feed(ThresholdRule(warning=10_000, critical_patience=1), EXPLOSION)
    assert [[a.tier for a in r] for r in results] == [[], [WARNING], [WARNING]]


def test_threshold_streak_breaks_on_a_value_below_critical():
    rule = ThresholdRule(warning=10, critical=100)
    tiers = [
        [a.tier for a in rule.update(step, {"g": v})]
        for step, v in enumerate([200, 50, 200, 200, 5, 200], start=1)
    ]
    assert tiers == [[WARNING], [WARNING], [WARNING], [CRITICAL], [], [WARNING]]


def test_threshold_streak_survives_missing_and_nonfinite_summaries():
    rule = ThresholdRule(critical=100)
    assert summary(rule.update(1, {"a": 500.0})) == [
        ("threshold", WARNING, 1, 500.0, 100.0, "a")
    ]
    assert rule.update(2, {"b": 1.0}) == []
    assert rule.update(3, {"a": math.nan}) == []
    assert [a.tier for a in rule.update(4, {"a": 500.0})] == [CRITICAL]


def test_threshold_streaks_are_per_subject():
    rule = ThresholdRule(critical=100)
    rule.update(1, {"a": 500.0, "b": 1.0})
    alerts = rule.update(2, {"a": 500.0, "b": 500.0})
    assert [(a.subject, a.tier) for a in alerts] == [("a", CRITICAL), ("b", WARNING)]


# --- VanishingRule -----------------------------------------------------------


def test_vanishing_fires_once_per_run_and_rearms_after_recovery():
    rule = VanishingRule(floor=1e-3, patience=3)
    values = [1e-4] * 5 + [1e-3] + [0.0] * 4
    fired = {
        step: summary(rule.update(step, {"dense/kernel": v}))
        for step, v in enumerate(values, start=1)
    }
    assert {step: a for step, a in fired.items() if a} == {
        3: [("vanishing", WARNING, 3, 1e-4, 1e-3, "dense/kernel")],
        9: [("vanishing", WARNING, 9, 0.0, 1e-3, "dense/kernel")],
    }


def test_vanishing_message_and_patience_one():
    alerts = feed(VanishingRule(floor=1e-3), [(1, 1e-4), (2, 1e-4), (3, 1e-4)])
    assert alerts[2][0].message.startswith(
        "WARNING vanishing gradient at step 3: grad_norm of 'global' = 0.0001 "
        "< 0.001 for 3 consecutive summaries. Hint: check for dead ReLUs"
    )
    assert alerts[2][0].details == {"consecutive": 3, "patience": 3}
    quick = VanishingRule(floor=1e-3, patience=1)
    assert [
        len(a) for a in feed(quick, [(1, 1e-4), (2, 1e-4), (3, 1.0), (4, 0.0)])
    ] == [1, 0, 0, 1]


def test_vanishing_run_survives_nonfinite_summaries():
    rule = VanishingRule(floor=1.0, patience=2)
    assert rule.update(1, {"g": 0.1}) == []
    assert rule.update(2, {"g": math.inf}) == []
    assert [a.step for a in rule.update(3, {"g": 0.1})] == [3]


# --- NonFiniteRule -----------------------------------------------------------


def test_nonfinite_one_alert_naming_subjects_by_count():
    counts = {"dense/bias": 3.0, "ok": 0.0, "dense/kernel": 10.0, "out/bias": 3.0}
    (alert,) = NonFiniteRule().update(40, counts)
    assert summary([alert]) == [("nonfinite", CRITICAL, 40, 16.0, 0.0, "dense/kernel")]
    assert alert.details == {
        "subjects": ["dense/kernel", "dense/bias", "out/bias"],
        "counts": {"dense/kernel": 10.0, "dense/bias": 3.0, "out/bias": 3.0},
    }
    assert alert.metric == "grad_nonfinite"
    assert alert.message == (
        "CRITICAL non-finite gradient at step 40: grad_nonfinite = 16 > 0 in "
        "3 subjects: 'dense/kernel' (10), 'dense/bias' (3), 'out/bias' (3). "
        "Hint: look at the first variable listed; enable skip_nonfinite in the "
        "config to protect the weights."
    )


def test_nonfinite_quiet_on_zero_counts_and_fires_every_bad_step():
    rule = NonFiniteRule()
    assert rule.update(1, {"a": 0.0, "b": 0.0}) == []
    assert rule.update(2, {}) == []
    assert [a.step for a in rule.update(3, {"a": 1.0})] == [3]
    assert [a.step for a in rule.update(4, {"a": 1.0})] == [4]


def test_nonfinite_counts_that_are_themselves_nonfinite():
    (alert,) = NonFiniteRule().update(1, {"a": math.nan, "b": math.inf, "c": -math.inf})
    assert alert.details["subjects"] == ["b", "a"]
    assert alert.details["counts"] == {"b": math.inf, "a": 1.0}
    assert alert.value == math.inf
    assert alert.to_dict()["value"] == "inf"


# --- SpikeRule ---------------------------------------------------------------


def warm(rule, n, start=0, subject="global"):
    # Deterministic +-10% wiggle around 1.0.
    for i in range(n):
        assert rule.update(start + i, {subject: 1.1 if i % 2 else 0.9}) == []
    return start + n


def test_spike_after_warmup_is_reported_with_its_log_threshold():
    rule = SpikeRule(warmup=20)
    step = warm(rule, 20)
    (alert,) = rule.update(step, {"global": 20.0})
    moments_std = 0.15  # the wiggle's log-std (~0.1) is below the floor
    assert summary([alert])[0][:4] == ("spike", WARNING, step, 20.0)
    assert alert.details["log_std"] == moments_std
    assert alert.threshold == pytest.approx(
        math.exp(alert.details["log_mean"] + 6 * moments_std)
    )
    assert alert.details["z"] == pytest.approx(
        (math.log(20.0) - alert.details["log_mean"]) / moments_std
    )
    assert alert.details["z"] > 19
    assert alert.details["level"] == pytest.approx(1.0, rel=0.01)
    assert alert.hint == EXPLOSION_HINT


def test_spike_not_reported_during_warmup():
    rule = SpikeRule(warmup=5)
    step = warm(rule, 4)
    assert rule.update(step, {"global": 1e6}) == []  # 5th observation
    rule = SpikeRule(warmup=5)
    step = warm(rule, 5)
    assert [a.step for a in rule.update(step, {"global": 1e6})] == [step]


@pytest.mark.parametrize("value", [1e-9, 0.0, -5.0, 2.0])  # 2.0: z = 4.6
def test_spike_ignores_drops_zeros_and_small_moves(value):
    rule = SpikeRule(warmup=10)
    step = warm(rule, 50)
    assert rule.update(step, {"global": value}) == []
    # None of them blinds the rule to a real spike (z = log(4) / 0.15 > 9).
    assert [a.value for a in rule.update(step + 1, {"global": 4.0})] == [4.0]


def test_spike_drop_does_not_inflate_the_variance():
    rule = SpikeRule(warmup=10)
    step = warm(rule, 10)
    before = rule._moments["global"].var
    rule.update(step, {"global": 1e-9})
    assert rule._moments["global"].var == before
    assert rule._moments["global"].mean < 0


def test_spike_sustained_explosion_keeps_firing_then_is_accepted():
    rule = SpikeRule(warmup=20)
    step = warm(rule, 50)
    fired = [bool(rule.update(step + i, {"global": 100.0})) for i in range(400)]
    first_quiet = fired.index(False)
    # Folding 100.0 at full weight would end the alerts within a few steps.
    assert first_quiet > 150
    assert all(fired[:first_quiet])
    assert not any(fired[first_quiet:])


def test_spike_statistics_are_per_subject():
    rule = SpikeRule(warmup=10)
    warm(rule, 10, subject="a")
    alerts = rule.update(10, {"a": 50.0, "b": 50.0})
    assert [a.subject for a in alerts] == ["a"]


# --- GrowthRule --------------------------------------------------------------


def test_growth_explosion_fires_on_both_jumps():
    first, second, third = feed(GrowthRule(), EXPLOSION)
    assert first == []
    assert summary(second) == [("growth", WARNING, 200, 130_486.0, 51_910.0, "global")]
    assert summary(third) == [("growth", WARNING, 300, 826_256.0, 51_910.0, "global")]
    assert second[0].details["ratio"] == pytest.approx(25.137, abs=1e-3)
    assert third[0].details["ratio"] == pytest.approx(159.17, abs=1e-2)
    assert third[0].message.startswith(
        "WARNING gradient growth at step 300: grad_norm of 'global' = 826,256 >= "
        "51,910 (159.2x the minimum 5,191 of the previous 2 summaries). Hint:"
    )


def test_growth_minimum_is_over_the_window_only():
    sequence = list(enumerate([1.0, 1.5, 2.0, 2.5, 10.5]))
    assert [len(a) for a in feed(GrowthRule(window=3), sequence)] == [0, 0, 0, 0, 0]
    assert [len(a) for a in feed(GrowthRule(window=4), sequence)] == [0, 0, 0, 0, 1]


def test_growth_boundary_and_zero_minimum():
    assert [len(a) for a in feed(GrowthRule(), [(1, 1.0), (2, 10.0)])] == [0, 1]
    assert [len(a) for a in feed(GrowthRule(), [(1, 1.0), (2, 9.99)])] == [0, 0]
    assert [len(a) for a in feed(GrowthRule(), [(1, 0.0), (2, 5.0)])] == [0, 0]
    rule = GrowthRule()
    assert [len(a) for a in feed(rule, [(1, 1.0), (2, math.nan), (3, 20.0)])] == [
        0,
        0,
        1,
    ]


# --- Shared behaviour --------------------------------------------------------


RULES = {
    "threshold": lambda **kw: ThresholdRule(warning=1.0, critical=2.0, **kw),
    "vanishing": lambda **kw: VanishingRule(floor=1.0, patience=2, **kw),
    "nonfinite": NonFiniteRule,
    "spike": lambda **kw: SpikeRule(warmup=2, **kw),
    "growth": GrowthRule,
}
# Values that make each rule fire on its third summary, and only there.
TRIGGERS = {
    "threshold": [0.5, 0.5, 5.0],
    "vanishing": [2.0, 0.5, 0.5],
    "nonfinite": [0.0, 0.0, 3.0],
    "spike": [1.0, 1.0, 50.0],
    "growth": [1.0, 1.0, 50.0],
}


@pytest.mark.parametrize("kind", sorted(RULES))
def test_stale_steps_return_nothing_and_change_no_state(kind):
    rule = RULES[kind]()
    values = TRIGGERS[kind]
    rule.update(10, {"g": values[0]})
    rule.update(20, {"g": values[1]})
    before = copy.deepcopy(vars(rule))
    for stale_step in (20, 15, -1):
        assert rule.update(stale_step, {"g": values[2], "h": values[2]}) == []
    assert vars(rule) == before
    fired = rule.update(30, {"g": values[2]})
    assert [(a.rule, a.step) for a in fired] == [(kind, 30)]
    assert rule.update(30, {"g": values[2]}) == []


@pytest.mark.parametrize("kind", sorted(RULES))
def test_subject_filter_uses_re_search(kind):
    rule = RULES[kind](subjects=r"dense/(kernel|bias)$")
    subjects = ["actor/dense/kernel", "critic/dense/bias", "critic/dense/kernel/m"]
    fired = []
    for step, value in enumerate(TRIGGERS[kind], start=1):
        for alert in rule.update(step, dict.fromkeys(subjects, value)):
            fired.extend(alert.details.get("subjects", [alert.subject]))
    assert sorted(fired) == ["actor/dense/kernel", "critic/dense/bias"]
    assert rule.applies_to("x/dense/bias")
    assert not rule.applies_to("dense/bias/slot")
    assert RULES[kind]().applies_to("dense/bias/slot")


@pytest.mark.parametrize("kind", ["threshold", "vanishing", "spike", "growth"])
def test_nonfinite_and_non_numeric_values_are_ignored(kind):
    rule = RULES[kind]()
    for step in range(1, 6):
        junk = {
            "nan": math.nan,
            "inf": math.inf,
            "-inf": -math.inf,
            "none": None,
            "text": "x",
        }
        assert rule.update(step, junk) == []
    assert vars(rule)["last_step"] == 5
    assert all(
        not state
        for key, state in vars(rule).items()
        if key.startswith("_") and isinstance(state, dict)
    )


def test_hint_and_metric_are_overridable():
    rule = ThresholdRule(warning=1.0, hint="call Bob", metric="weight_norm")
    (alert,) = rule.update(1, {"w": 2.0})
    assert (alert.hint, alert.metric, rule.metric) == (
        "call Bob",
        "weight_norm",
        "weight_norm",
    )
    assert alert.message.endswith("Hint: call Bob.")
    assert NonFiniteRule().metric == "grad_nonfinite"
    assert {r().metric for k, r in RULES.items() if k != "nonfinite"} == {"grad_norm"}


@pytest.mark.parametrize("kind", sorted(RULES))
def test_reset_forgets_state(kind):
    rule = RULES[kind]()
    for step, value in enumerate(TRIGGERS[kind][:2], start=10):
        rule.update(step, {"g": value})
    rule.reset()
    assert rule.last_step is None
    assert rule.update(1, {"g": TRIGGERS[kind][0]}) == []
    fresh = RULES[kind]()
    fresh.update(1, {"g": TRIGGERS[kind][0]})
    assert vars(rule) == vars(fresh)
