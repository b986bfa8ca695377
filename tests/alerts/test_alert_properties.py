"""Property tests: quiet on healthy runs, never raising on any input."""

from __future__ import annotations

import copy
import json
import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from keras_gradmon.alerts import (
    TIERS,
    AlertEngine,
    GrowthRule,
    NonFiniteRule,
    RateLimiter,
    SpikeRule,
    ThresholdRule,
    VanishingRule,
)

STEPS = 300
SUBJECTS = ("global", "actor/dense/kernel", "critic/dense/bias")


def quiet(engine, norms_by_subject):
    for i in range(STEPS):
        alerts = engine.update(
            10 * i,
            {
                "grad_norm": {s: norms[i] for s, norms in norms_by_subject.items()},
                "grad_nonfinite": dict.fromkeys(norms_by_subject, 0.0),
            },
        )
        if alerts:
            return alerts[0].message
    return None


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    level=st.floats(1e-6, 1e6),
    decay_per_step=st.floats(0.0, 0.01),
    sigma=st.floats(0.0, 0.15),
)
def test_default_rules_quiet_on_lognormal_noise(seed, level, decay_per_step, sigma):
    rng = random.Random(seed)
    norms = {
        subject: [
            level * scale * math.exp(-decay_per_step * i) * rng.lognormvariate(0, sigma)
            for i in range(STEPS)
        ]
        for subject, scale in zip(SUBJECTS, (1.0, 0.3, 0.01), strict=True)
    }
    assert quiet(AlertEngine(), norms) is None


@settings(max_examples=25, deadline=None)
@given(
    wiggle=st.lists(st.floats(-0.3, 0.3), min_size=STEPS, max_size=STEPS),
    level=st.floats(1e-3, 1e3),
    decay_per_step=st.floats(0.0, 0.01),
)
def test_default_rules_quiet_on_any_30_percent_fluctuation(
    wiggle, level, decay_per_step
):
    # Hypothesis picks the fluctuations, so it also tries the worst orders
    # (long lows followed by highs), not just random noise.
    norms = [
        level * math.exp(-decay_per_step * i) * (1.0 + w) for i, w in enumerate(wiggle)
    ]
    assert quiet(AlertEngine(), {"global": norms}) is None


def all_rules():
    return [
        ThresholdRule(warning=1.0, critical=100.0, critical_patience=2),
        VanishingRule(floor=1e-3, patience=2),
        NonFiniteRule(),
        SpikeRule(window=20, warmup=1, min_samples=2),
        GrowthRule(factor=2.0, window=2, warmup=1),
    ]


anything = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.integers(-(10**400), 10**400),
    st.sampled_from([0.0, -0.0, 5e-324, 1.7976931348623157e308, math.nan, math.inf]),
)
summaries = st.lists(
    st.tuples(
        st.integers(-3, 50),
        st.dictionaries(st.sampled_from(["a", "b", "c/d"]), anything, max_size=3),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(summaries=summaries)
def test_rules_never_raise_and_alerts_are_consistent(summaries):
    rules = all_rules()
    engine = AlertEngine(
        {f"r{i}": rule for i, rule in enumerate(all_rules())},
        limiter=RateLimiter(cooldown_steps=2, max_per_rule=3),
    )
    for step, values in summaries:
        emitted = engine.update(step, {"grad_norm": values, "grad_nonfinite": values})
        for rule in rules:
            emitted += rule.update(step, values)
        for alert in emitted:
            assert alert.tier in TIERS
            assert alert.step == step
            json.dumps(alert.to_dict(), allow_nan=False)
            assert "\n" not in alert.message
            if alert.rule == "nonfinite":
                assert alert.value > 0
                assert alert.subject == alert.details["subjects"][0]
            else:
                assert math.isfinite(alert.value)
            if alert.comparison == ">":
                assert alert.value > alert.threshold
            elif alert.comparison == ">=":
                assert alert.value >= alert.threshold
            else:
                assert alert.value < alert.threshold


@settings(max_examples=60, deadline=None)
@given(summaries=summaries, replay=st.integers(0, 29))
def test_replayed_steps_never_fire_or_change_state(summaries, replay):
    for rule in all_rules():
        fed = []
        for step, values in summaries:
            rule.update(step, values)
            fed.append(values)
        if rule.last_step is None:
            continue
        before = copy.deepcopy(vars(rule))
        stale_step = rule.last_step - replay % 3
        assert rule.update(stale_step, fed[replay % len(fed)]) == []
        assert vars(rule) == before
