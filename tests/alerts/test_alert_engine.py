"""Tests of `AlertEngine` routing and of the default rule set."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from keras_gradmon.alerts import (
    CRITICAL,
    WARNING,
    AlertEngine,
    GrowthRule,
    NonFiniteRule,
    RateLimiter,
    SpikeRule,
    ThresholdRule,
    VanishingRule,
    default_rules,
)

EXPLOSION = [(100, 5_191.0), (200, 130_486.0), (300, 826_256.0)]


def healthy(steps, seed=0, level=3.0):
    rng = random.Random(seed)
    return [
        level * math.exp(-0.003 * i) * rng.lognormvariate(0, 0.15) for i in range(steps)
    ]


def test_rules_read_their_own_metric():
    threshold = ThresholdRule(warning=1.0)
    nonfinite = NonFiniteRule()
    weights = ThresholdRule(warning=100.0, metric="weight_norm")
    engine = AlertEngine({"t": threshold, "n": nonfinite, "w": weights})
    alerts = engine.update(
        1,
        {
            "grad_norm": {"global": 5.0},
            "grad_nonfinite": {"dense/kernel": 2.0},
            "weight_norm": {"global": 500.0},
        },
    )
    assert [(a.rule, a.metric, a.value) for a in alerts] == [
        ("threshold", "grad_norm", 5.0),
        ("nonfinite", "grad_nonfinite", 2.0),
        ("threshold", "weight_norm", 500.0),
    ]
    assert alerts[2].message.startswith("WARNING weight_norm threshold at step 1:")


def test_missing_metric_skips_the_rule_without_consuming_the_step():
    nonfinite = NonFiniteRule()
    engine = AlertEngine([nonfinite, ThresholdRule(warning=1.0)])
    assert [a.rule for a in engine.update(7, {"grad_norm": {"g": 3.0}})] == [
        "threshold"
    ]
    assert nonfinite.last_step is None
    assert engine.update(8, {}) == []


def test_sequence_rules_are_named_by_kind():
    engine = AlertEngine(
        [
            ThresholdRule(warning=1.0, subjects="^actor"),
            ThresholdRule(warning=2.0, subjects="^critic"),
            GrowthRule(),
        ]
    )
    assert list(engine.rules) == ["threshold", "threshold_2", "growth"]


def test_history_keeps_what_the_limiter_lets_through():
    engine = AlertEngine(
        [ThresholdRule(warning=10_000, critical=50_000)],
        limiter=RateLimiter(cooldown_steps=1_000),
    )
    results = [engine.update(s, {"grad_norm": {"g": v}}) for s, v in EXPLOSION]
    results.append(engine.update(400, {"grad_norm": {"g": 900_000.0}}))
    assert [[a.tier for a in r] for r in results] == [[], [WARNING], [CRITICAL], []]
    assert [(a.step, a.tier) for a in engine.history] == [
        (200, WARNING),
        (300, CRITICAL),
    ]
    assert engine.limiter.suppressed == 1


def test_default_engine_on_the_explosion_then_nan():
    engine = AlertEngine()
    fired = [
        [
            (a.rule, a.tier)
            for a in engine.update(
                step,
                {
                    "grad_norm": {"global": value},
                    "grad_nonfinite": {"global": 0.0, "dense/kernel": 0.0},
                },
            )
        ]
        for step, value in EXPLOSION
    ]
    assert fired == [[], [("growth", WARNING)], [("growth", WARNING)]]
    alerts = engine.update(
        400,
        {
            "grad_norm": {"global": math.nan},
            "grad_nonfinite": {"global": 7.0, "dense/kernel": 7.0},
        },
    )
    assert [(a.rule, a.tier, a.value, a.details["subjects"]) for a in alerts] == [
        ("nonfinite", CRITICAL, 14.0, ["global", "dense/kernel"])
    ]
    assert len(engine.history) == 3


def test_default_rules_catch_a_norm_ten_times_its_level():
    engine = AlertEngine()
    norms = [*healthy(200), 2.0, 6.4, 30.0]  # about 1x, 3x, 14x the median
    fired = {}
    for step, value in enumerate(norms):
        alerts = engine.update(step, {"grad_norm": {"global": value}})
        if alerts:
            fired[step] = sorted(a.rule for a in alerts)
    median = float(np.exp(np.median(np.log(norms[:202:3]))))  # 1 in 3 kept
    assert 6.4 < 10 * median <= 30.0
    assert fired == {202: ["growth", "spike"]}
    (growth,) = [a for a in engine.history if a.rule == "growth"]
    assert growth.details["level"] == pytest.approx(median, rel=1e-12)


def test_default_rules_catch_a_single_large_spike():
    engine = AlertEngine()
    norms = healthy(300, seed=1)
    norms[280] *= 12.0
    fired = [
        (step, a.rule)
        for step, value in enumerate(norms)
        for a in engine.update(
            step, {"grad_norm": {"global": value, "dense/kernel": value}}
        )
    ]
    # The defaults watch the global norm only: the variable is not named.
    # 12x the current norm is z = 6.6 against the median and spread of a
    # norm that fell 2.3x over these 280 steps (log-std 0.30), and 6.9x
    # that median: a spike, not growth.
    assert fired == [(280, "spike")]


def test_default_rules_are_fresh_objects_without_threshold_or_vanishing():
    first, second = default_rules(), default_rules()
    assert list(first) == [
        "nonfinite",
        "growth",
        "spike",
        "vanishing_layers",
        "interval_spike",
        "skipped_spike",
        "clip_fraction",
        "update_ratio",
    ]
    assert all(first[name] is not second[name] for name in first)
    assert not any(
        isinstance(rule, (ThresholdRule, VanishingRule)) for rule in first.values()
    )
    spike = first["spike"]
    assert isinstance(spike, SpikeRule)
    assert (spike.z_threshold, spike.window, spike.warmup) == (6.0, 1000, 100)
    growth = first["growth"]
    assert (growth.factor, growth.window, growth.warmup) == (10.0, 1000, 100)


def test_reset_clears_rules_limiter_and_history():
    engine = AlertEngine([GrowthRule()], limiter=RateLimiter(cooldown_steps=10))
    for step, value in EXPLOSION:
        engine.update(step, {"grad_norm": {"g": value}})
    assert len(engine.history) == 2
    engine.reset()
    assert engine.history == []
    # The warm-up starts again: the rule forgot the explosion.
    assert engine.update(1, {"grad_norm": {"g": 1.0}}) == []
    assert engine.update(100, {"grad_norm": {"g": 1.0}}) == []
    assert len(engine.update(101, {"grad_norm": {"g": 10.0}})) == 1
