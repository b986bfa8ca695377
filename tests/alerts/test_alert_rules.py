"""Tests of each alert rule on synthetic sequences."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from keras_gradmon.alerts import (
    CRITICAL,
    EXPLOSION_HINT,
    WARNING,
    GrowthRule,
    NonFiniteRule,
    SpikeRule,
    ThresholdRule,
    VanishingLayersRule,
    VanishingRule,
)
from keras_gradmon.alerts.defaults import default_rules

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
    # Deterministic +-10% wiggle around 1.0, one summary per step.
    for i in range(n):
        assert rule.update(start + i, {subject: 1.1 if i % 2 else 0.9}) == []
    return start + n


def test_spike_after_warmup_is_reported_with_its_log_threshold():
    rule = SpikeRule(window=200, warmup=20)
    step = warm(rule, 20)
    (alert,) = rule.update(step, {"global": 20.0})
    median = 0.5 * (math.log(0.9) + math.log(1.1))  # 10 of each
    assert summary([alert])[0][:4] == ("spike", WARNING, step, 20.0)
    # The wiggle's log-std (0.1003) is below the floor of 0.15.
    assert alert.details["log_std"] == 0.15
    assert alert.details["log_median"] == pytest.approx(median, rel=1e-12)
    assert alert.threshold == pytest.approx(math.exp(median + 6 * 0.15))
    assert alert.details["z"] == pytest.approx((math.log(20.0) - median) / 0.15)
    assert alert.details["level"] == pytest.approx(math.exp(median))
    assert alert.hint == EXPLOSION_HINT
    assert "against a level of 0.995, the median of the previous 20 steps" in (
        alert.message
    )


def test_spike_warmup_is_in_steps_and_needs_min_samples():
    # Summaries every step: judged once the history spans `warmup` steps.
    rule = SpikeRule(window=200, warmup=20)
    step = warm(rule, 19)
    assert rule.update(step, {"global": 1e6}) == []  # spans 19 steps
    rule = SpikeRule(window=200, warmup=20)
    step = warm(rule, 20)
    assert [a.step for a in rule.update(step, {"global": 1e6})] == [step]
    # Summaries every 100 steps: the warm-up is long past, the 10 samples
    # of `min_samples` are what it waits for.
    rule = SpikeRule()
    for i in range(9):
        assert rule.update(100 * i, {"global": 1.0}) == []
    assert rule.update(900, {"global": 1e6}) == []  # 9 samples before it
    rule = SpikeRule()
    for i in range(10):
        rule.update(100 * i, {"global": 1.0})
    assert [a.step for a in rule.update(1000, {"global": 1e6})] == [1000]


@pytest.mark.parametrize("value", [1e-9, 0.0, -5.0, 2.0])  # 2.0: z = 4.6
def test_spike_ignores_drops_zeros_and_small_moves(value):
    rule = SpikeRule(window=200, warmup=10)
    step = warm(rule, 50)
    assert rule.update(step, {"global": value}) == []
    # None of them blinds the rule to a real spike (z = log(4) / 0.15 > 9).
    assert [a.value for a in rule.update(step + 1, {"global": 4.0})] == [4.0]


def test_spike_scale_includes_the_heavy_tail_of_a_noisy_norm():
    # A norm that is 5x its usual value in one batch of four: the median
    # is 1.0, the log-std 0.70, so a 50x batch is z = 5.6, 100x is 6.6.
    history = [5.0 if step % 4 == 0 else 1.0 for step in range(100)]
    fired = {}
    for jump in (50.0, 100.0):
        rule = SpikeRule(window=200, warmup=10)
        assert not any(rule.update(s, {"global": v}) for s, v in enumerate(history))
        fired[jump] = rule.update(100, {"global": jump})
    assert fired[50.0] == []
    assert fired[100.0][0].details["log_std"] == pytest.approx(
        float(np.std(np.log(history))), rel=1e-9
    )


def test_spike_a_drop_does_not_widen_the_spread():
    rule = SpikeRule(window=200, warmup=10)
    step = warm(rule, 50)
    assert rule.update(step, {"global": 1e-9}) == []
    (alert,) = rule.update(step + 1, {"global": 4.0})
    # The drop entered at exp(median - 6 * 0.15), not at 1e-9.
    ys = [math.log(1.1 if i % 2 else 0.9) for i in range(50)]
    ys.append(float(np.median(ys)) - 0.9)
    assert alert.details["log_std"] == pytest.approx(float(np.std(ys)), rel=1e-9)


def test_spike_sustained_explosion_is_a_spike_then_growth():
    # The spike rule flags the jump to a plateau 100x higher for a few steps
    # (then the spread widens); the growth rule says the jump once, since
    # the plateau makes no new high, and a climb at every step it keeps
    # reporting, well after the spread has swallowed the spike rule's z.
    spike, growth = SpikeRule(window=200), GrowthRule(window=200)
    climb = GrowthRule(window=200)
    for step in range(200):
        for rule in (spike, growth, climb):
            rule.update(step, {"global": 1.0})
    spikes = [bool(spike.update(200 + i, {"global": 100.0})) for i in range(300)]
    grows = [bool(growth.update(200 + i, {"global": 100.0})) for i in range(300)]
    climbs = [
        bool(climb.update(200 + i, {"global": 100.0 * 1.05**i})) for i in range(90)
    ]
    assert spikes[:3] == [True] * 3
    assert not any(spikes[20:])
    assert grows == [True] + [False] * 299
    assert all(climbs)  # at 90 steps the median is still 1.0


def test_spike_statistics_are_per_subject():
    rule = SpikeRule(window=200, warmup=10)
    warm(rule, 10, subject="a")
    alerts = rule.update(10, {"a": 50.0, "b": 50.0})
    assert [a.subject for a in alerts] == ["a"]


# --- GrowthRule --------------------------------------------------------------


def test_growth_explosion_fires_at_the_documented_steps():
    # docs/signals.md: with summaries every 100 steps the default growth
    # rule fires at step 200 (25x) and again at 300.
    first, second, third = feed(GrowthRule(), EXPLOSION)
    assert first == []
    assert summary(second)[0][:4] == ("growth", WARNING, 200, 130_486.0)
    assert second[0].threshold == pytest.approx(51_910.0, rel=1e-12)
    level = math.sqrt(5_191.0 * 130_486.0)  # the median of two: in log space
    assert summary(third)[0][:4] == ("growth", WARNING, 300, 826_256.0)
    assert third[0].threshold == pytest.approx(10 * level, rel=1e-12)
    assert second[0].details["ratio"] == pytest.approx(25.137, abs=1e-3)
    assert third[0].details["ratio"] == pytest.approx(826_256.0 / level, rel=1e-12)
    assert third[0].details["peak"] == pytest.approx(130_486.0, rel=1e-12)
    assert third[0].message.startswith(
        "WARNING gradient growth at step 300: grad_norm of 'global' = 826,256 >= "
        "260,260 (31.75x its level 26,026, the median of the previous 200 "
        "steps, and above their largest, 130,486). Hint:"
    )


def test_growth_level_is_the_median_over_the_window_in_steps():
    # 150 steps at 1.0, then 100 at 2.0; at step 250 a value of 15: 7.5x
    # the median of the last 100 steps (2.0), 15x the median of the last
    # 300 (1.0, the value of 150 of the 250 steps).
    sequence = [(s, 1.0) for s in range(150)] + [(s, 2.0) for s in range(150, 250)]
    sequence.append((250, 15.0))
    short = feed(GrowthRule(window=100), sequence)
    long = feed(GrowthRule(window=300), sequence)
    assert not any(short)
    assert [i for i, alerts in enumerate(long) if alerts] == [250]
    assert long[-1][0].details["level"] == 1.0


def test_growth_is_judged_after_warmup_steps():
    early = [(s, 1.0) for s in range(50)] + [(50, 100.0)]
    assert not any(feed(GrowthRule(), early))  # 50 steps < warmup 100
    late = [(s, 1.0) for s in range(100)] + [(100, 100.0)]
    assert [a.step for a in feed(GrowthRule(), late)[-1]] == [100]


def test_growth_boundary_zero_and_nan():
    rule = GrowthRule(warmup=1)
    assert [len(a) for a in feed(rule, [(1, 1.0), (2, 10.0)])] == [0, 1]
    rule = GrowthRule(warmup=1)
    assert [len(a) for a in feed(rule, [(1, 1.0), (2, 9.99)])] == [0, 0]
    rule = GrowthRule(warmup=1)
    assert [len(a) for a in feed(rule, [(1, 0.0), (2, 5.0)])] == [0, 0]
    rule = GrowthRule(warmup=1)
    assert [len(a) for a in feed(rule, [(1, 1.0), (2, math.nan), (3, 20.0)])] == [
        0,
        0,
        1,
    ]


@pytest.mark.parametrize("every", [1, 10, 100])
def test_growth_and_spike_mean_the_same_at_every_frequency(every):
    # A healthy norm that drifts 3x over 5,000 steps with +-30% noise stays
    # silent at every summary frequency; the same run exploding 2x every
    # 10 steps from step 5,000 is caught by growth within one summary of
    # the step where it reaches 10x its level.
    rng = np.random.default_rng(0)
    steps = np.arange(0, 6000, every)
    noise = np.exp(rng.normal(0, 0.3, len(steps)))
    drift = np.exp(np.log(3.0) * np.minimum(steps, 5000) / 5000)
    explosion = 2.0 ** (np.maximum(steps - 5000, 0) / 10)
    norms = drift * noise * explosion
    rules = default_rules()
    fired = {}
    for step, norm in zip(steps, norms):
        for name in ("growth", "spike"):
            if rules[name].update(int(step), {"global": float(norm)}):
                fired.setdefault(name, int(step))
    assert min(fired.values()) >= 5000
    # 10x its level: 2**(t/10) = 10 at t = 33 steps (noise aside).
    assert 5000 + 20 <= fired["growth"] <= 5000 + 50 + every


# --- Shared behaviour --------------------------------------------------------


RULES = {
    "threshold": lambda **kw: ThresholdRule(warning=1.0, critical=2.0, **kw),
    "vanishing": lambda **kw: VanishingRule(floor=1.0, patience=2, **kw),
    "nonfinite": NonFiniteRule,
    "spike": lambda **kw: SpikeRule(window=200, warmup=1, min_samples=2, **kw),
    "growth": lambda **kw: GrowthRule(warmup=1, **kw),
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


# --- VanishingLayersRule -----------------------------------------------------


def gap(ratio, largest=0.3):
    return {"seq/sig0/kernel": ratio * largest, "seq/out/kernel": largest}


@pytest.mark.parametrize(
    ("every", "start", "expected"),
    [(1, 0, 100), (100, 0, 100), (1, 500, 599), (100, 500, 500), (30, 0, 120)],
)
def test_vanishing_layers_fires_after_patience_steps(every, start, expected):
    # The gap counts from the summary before it opened, so every frequency
    # fires on the first summary 100 steps after the last healthy one.
    rule = VanishingLayersRule()
    fired = []
    for step in range(0, 2000, every):
        values = gap(1e-7 if step >= start else 0.5)
        fired += [(a.step, a.subject, a.tier) for a in rule.update(step, values)]
    assert fired == [(expected, "seq/sig0/kernel", WARNING)]


def test_vanishing_layers_reports_the_gap_and_rearms():
    rule = VanishingLayersRule()
    assert feed(rule, [(0, 1.0), (99, 1.0)], "dense/bias") == [[], []]
    norms = {"a/kernel": 3e-9, "b/kernel": 1e-3, "c/kernel": 0.3, "c/bias": 1e-12}
    assert rule.update(100, norms) == []
    (alert,) = rule.update(200, norms)
    assert (alert.subject, alert.value) == ("a/kernel", 3e-9)
    assert alert.threshold == pytest.approx(3e-6)
    assert alert.details == {
        "ratio": pytest.approx(1e-8),
        "largest": "c/kernel",
        "since_step": 100,
    }
    assert alert.comparison == "<"
    assert rule.update(300, norms) == []  # once per gap
    assert rule.update(400, gap(2e-5)) == []  # 2e-5 >= 1e-5: closed
    assert rule.update(450, gap(1e-6)) == []
    assert [a.step for a in rule.update(550, gap(1e-6))] == [550]
    # Fewer than two positive kernels neither extend nor end a gap.
    rule = VanishingLayersRule()
    rule.update(0, gap(1e-7))
    rule.update(60, {"seq/sig0/kernel": 0.0, "seq/out/kernel": 0.3})
    assert [a.step for a in rule.update(100, gap(1e-7))] == [100]
