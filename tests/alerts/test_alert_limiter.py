"""Tests of `RateLimiter`: cooldown, escalation and caps."""

from __future__ import annotations

from keras_gradmon.alerts import CRITICAL, WARNING, Alert, RateLimiter


def make(step, tier=WARNING, rule="threshold", subject="global"):
    return Alert(rule, tier, step, 2.0, 1.0, subject, "hint")


def passed_steps(limiter, alerts):
    return [(a.step, a.tier) for a in limiter.filter(alerts)]


def test_cooldown_suppresses_repeats_of_the_same_key():
    limiter = RateLimiter(cooldown_steps=300)
    emitted = [
        s
        for step in range(100, 800, 100)
        for s, _ in passed_steps(limiter, [make(step)])
    ]
    assert emitted == [100, 400, 700]
    assert limiter.suppressed == 4
    assert limiter.suppressed_by_rule == {"threshold": 4}


def test_cooldown_is_per_rule_and_subject():
    limiter = RateLimiter(cooldown_steps=300)
    alerts = [make(100), make(100, subject="dense"), make(100, rule="growth")]
    assert len(limiter.filter(alerts)) == 3
    assert limiter.filter([make(200), make(200, subject="dense")]) == []
    assert limiter.suppressed == 2


def test_zero_cooldown_lets_everything_through():
    limiter = RateLimiter()
    alerts = [make(1), make(1), make(2), make(2, CRITICAL)]
    assert limiter.filter(alerts) == alerts
    assert limiter.suppressed == 0


def test_critical_passes_a_warning_cooldown_but_not_the_reverse():
    limiter = RateLimiter(cooldown_steps=300)
    assert passed_steps(limiter, [make(100)]) == [(100, WARNING)]
    assert passed_steps(limiter, [make(200, CRITICAL)]) == [(200, CRITICAL)]
    # A warning says less than the critical still cooling down.
    assert passed_steps(limiter, [make(300), make(300, CRITICAL)]) == []
    assert passed_steps(limiter, [make(450)]) == []
    assert passed_steps(limiter, [make(500), make(500, CRITICAL)]) == [
        (500, WARNING),
        (500, CRITICAL),
    ]
    assert limiter.suppressed == 3


def test_cap_per_rule_and_tier_with_a_final_note():
    limiter = RateLimiter(max_per_rule=2)
    alerts = [make(1, rule="spike", subject=f"v{i}") for i in range(5)]
    passed = limiter.filter(alerts)
    assert [a.subject for a in passed] == ["v0", "v1"]
    assert passed[0].note == ""
    assert passed[1].note == (
        "last spike warning: further ones are suppressed (max_per_rule=2)"
    )
    assert passed[1].message.endswith(
        "[last spike warning: further ones are suppressed (max_per_rule=2)]"
    )
    assert passed[1].details == alerts[1].details
    assert limiter.suppressed_by_rule == {"spike": 3}
    # Warnings never use up the budget of a later critical.
    assert [a.tier for a in limiter.filter([make(2, rule="spike", tier=CRITICAL)])] == [
        CRITICAL
    ]
    assert limiter.filter([make(3, rule="growth")])[0].rule == "growth"


def test_step_before_last_emission_counts_as_a_new_run():
    limiter = RateLimiter(cooldown_steps=1000)
    limiter.filter([make(5000)])
    assert passed_steps(limiter, [make(10)]) == [(10, WARNING)]


def test_reset_clears_everything():
    limiter = RateLimiter(cooldown_steps=100, max_per_rule=1)
    limiter.filter([make(1), make(2)])
    assert limiter.suppressed == 1
    limiter.reset()
    assert limiter.suppressed == 0
    assert passed_steps(limiter, [make(3)]) == [(3, WARNING)]
