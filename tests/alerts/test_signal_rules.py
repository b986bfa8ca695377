"""The rules of issue 21's signals on constructed summary sequences:
clipping fraction, update/weight ratio band, spikes between summaries,
skipped spikes."""

import math

import numpy as np
import pytest

from keras_gradmon.alerts import (
    AlertEngine,
    ClipFractionRule,
    IntervalSpikeRule,
    RateLimiter,
    SkippedSpikeRule,
    UpdateRatioRule,
    default_rules,
)


def _clip_alerts(rule, summaries):
    return [
        (alert.step, alert.value)
        for step, fraction in summaries
        for alert in rule.update(step, {"fraction": fraction, "pre_norm": 3.0})
    ]


def test_clip_fraction_weights_each_summary_by_the_steps_it_covers():
    # Irregular summaries: summary 100 covers steps 1-100 (40% clipped), the
    # whole window; at step 130 the window holds steps 31-130: 70 of summary
    # 100 and all 30 of summary 130 (100% clipped), nothing of step 0.
    rule = ClipFractionRule(window=100)
    assert _clip_alerts(rule, [(0, 1.0), (100, 0.4)]) == []
    assert rule.windowed() == (100, pytest.approx(0.4))
    assert _clip_alerts(rule, [(130, 1.0)]) == [
        (130, pytest.approx((70 * 0.4 + 30 * 1.0) / 100, abs=1e-12))
    ]


def test_clip_fraction_waits_for_a_whole_window_and_fires_once_per_episode():
    rule = ClipFractionRule(window=300, fraction=0.5)
    summaries = [(step, 1.0) for step in range(0, 301, 100)]  # 0..300: 301 steps
    summaries += [(400, 1.0), (500, 0.0), (600, 0.0), (700, 0.2)]  # 0.4: ends
    summaries += [(800, 1.0), (900, 1.0)]  # 0.73: a new episode
    fired = _clip_alerts(rule, summaries)
    assert [step for step, _ in fired] == [300, 900]
    assert fired[1][1] == pytest.approx((20 + 100 + 100) / 300)


def test_clip_fraction_rule_is_silent_without_clipping_and_on_half():
    engine = AlertEngine(default_rules())
    for step in range(0, 5000, 100):
        metrics = {"grad_norm": {"global": 1.0}, "grad_nonfinite": {}}
        assert engine.update(step, metrics) == []
    rule = ClipFractionRule(window=100)
    assert _clip_alerts(rule, [(s, 0.5) for s in range(0, 1000, 50)]) == []


def _cosine_run(total=100_000, every=100, warmup=2_000, seed=0):
    """Ratios of a healthy run: about 1e-3 at the peak learning rate, warmed
    up linearly, then decayed by cosine to 0 (times lognormal noise)."""
    rng = np.random.default_rng(seed)
    for step in range(0, total, every):
        if step < warmup:
            lr = (step + 1) / warmup
        else:
            lr = 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
        noise = rng.lognormal(0.0, 0.3, size=3)
        yield (
            step,
            {
                "global": 1e-3 * lr * noise[0],
                "encoder": 2e-3 * lr * noise[1],
                "head": 5e-4 * lr * noise[2],
            },
        )


def test_update_ratio_defaults_are_silent_on_a_cosine_schedule_to_zero():
    rule = default_rules()["update_ratio"]
    assert [rule.update(step, v) for step, v in _cosine_run()] == [[]] * 1000


@pytest.mark.parametrize(
    "value, comparison, threshold", [(1e-9, "<", 1e-7), (0.5, ">", 0.1)]
)
def test_update_ratio_fires_once_a_group_stays_out_of_band(
    value, comparison, threshold
):
    rule = UpdateRatioRule(steps=1000)
    fired = []
    for step in range(0, 5000, 100):
        out = 1200 <= step < 2500 or step >= 3000
        ratios = {"global": 1e-3, "a": 1e-3, "b": value if out else 1e-3}
        fired += rule.update(step, ratios)
    # Runs out of band from 1200 (to 2400) and from 3000: said at 2200 and
    # 4000, once each; "global" and the healthy group never.
    assert [(a.step, a.subject) for a in fired] == [(2200, "b"), (4000, "b")]
    assert all(
        (a.comparison, a.threshold, a.value) == (comparison, threshold, value)
        for a in fired
    )
    assert "since step 3000 (healthy band 1e-07 to 0.1)" in fired[1].message


def test_update_ratio_watches_global_only_without_groups_or_when_asked():
    alone = UpdateRatioRule(steps=0)
    assert [a.subject for a in alone.update(1, {"global": 1.0})] == ["global"]
    grouped = UpdateRatioRule(steps=0)
    assert grouped.update(1, {"global": 1.0, "g": 1e-3}) == []
    chosen = UpdateRatioRule(steps=0, subjects="^global$")
    assert [a.subject for a in chosen.update(1, {"global": 1.0, "g": 1.0})] == [
        "global"
    ]


def _norms(step, spike_at=None, spike=100.0):
    """`spikes/*` of the summary at `step` (every 100 steps): steps
    step-99..step with norms about 1, one of them `spike`."""
    rng = np.random.default_rng(step)
    norms = rng.lognormal(0.0, 0.1, size=100)
    if spike_at is not None:
        norms[spike_at - (step - 99)] = spike
    at = int(np.argmax(norms))
    return {
        "max_norm": float(norms[at]),
        "min_norm": float(norms.min()),
        "max_step": float(step - 99 + at),
    }


def test_a_spike_between_summaries_is_reported_at_its_step():
    engine = AlertEngine(default_rules())
    alerts = []
    for step in range(99, 5000, 100):
        metrics = {
            "grad_norm": {"global": 1.0},
            "spikes": _norms(step, spike_at=3737 if step == 3799 else None),
        }
        alerts += engine.update(step, metrics)
    (alert,) = alerts
    assert (alert.rule, alert.step, alert.value) == ("spike", 3737, 100.0)
    assert alert.details["summary_step"] == 3799
    assert alert.message.startswith(
        "WARNING gradient spike at step 3737: spikes/max_norm of 'global' = 100 > "
    )
    assert "written with the summary of step 3799; z = " in alert.message


def test_a_spike_at_the_summary_step_is_said_once_by_the_norms_spike_rule():
    engine = AlertEngine(default_rules(), RateLimiter())
    alerts = []
    for step in range(99, 3000, 100):
        norms = _norms(step, spike_at=2999 if step == 2999 else None)
        value = norms["max_norm"] if step == 2999 else 1.0
        metrics = {"grad_norm": {"global": value}, "spikes": norms}
        alerts += engine.update(step, metrics)
    spikes = [(a.step, a.metric) for a in alerts if a.rule == "spike"]
    assert spikes == [(2999, "grad_norm")]  # (the growth rule sees it too)


def test_interval_spikes_stay_quiet_before_warmup_and_on_noise():
    rule = IntervalSpikeRule(warmup=20)
    fired = [rule.update(step, _norms(step)) for step in range(99, 20_000, 100)]
    assert fired == [[]] * 200
    early = IntervalSpikeRule(warmup=20)
    assert early.update(99, _norms(99, spike_at=50, spike=1e6)) == []


def test_each_skipped_spike_is_said_with_the_steps_it_lies_in():
    rule = SkippedSpikeRule()
    counts = {100: 0, 200: 0, 300: 1, 400: 1, 500: 3}
    fired = [a for step, n in counts.items() for a in rule.update(step, {"spikes": n})]
    assert [(a.step, a.value, a.threshold, a.details["skipped"]) for a in fired] == [
        (300, 1.0, 0.0, 1),
        (500, 3.0, 1.0, 2),
    ]
    assert fired[0].message.startswith(
        "WARNING spiking step skipped at step 300: skipped/spikes of 'global' = 1 "
        "> 0 (1 spiking step skipped, steps 201 to 300). Hint: the update was "
        "not applied"
    )
    assert "(2 spiking steps skipped, steps 401 to 500)" in fired[1].message
    first = SkippedSpikeRule().update(700, {"spikes": 2.0, "steps": 5.0})
    assert "(2 spiking steps skipped, so far)" in first[0].message


def test_a_skipped_spike_is_named_by_its_step_when_spikes_are_tracked():
    engine = AlertEngine(default_rules())
    metrics = {"grad_norm": {"global": 1.0}, "skipped": {"steps": 0.0, "spikes": 0.0}}
    assert engine.update(99, {**metrics, "spikes": _norms(99)}) == []
    skipped = {"steps": 1.0, "spikes": 1.0}
    spikes = _norms(199, spike_at=137, spike=50.0)
    (alert,) = engine.update(199, {**metrics, "skipped": skipped, "spikes": spikes})
    assert alert.rule == "skipped_spike"  # (the interval rule is in warm-up)
    assert "(1 spiking step skipped, at step 137, the largest norm of steps 100 " in (
        alert.message
    )
    two = engine.update(299, {**metrics, "skipped": {"spikes": 3.0}, "spikes": spikes})
    assert "(2 spiking steps skipped, steps 200 to 299)" in two[0].message


@pytest.mark.parametrize(
    "build, name, value",
    [
        (lambda: ClipFractionRule(window=0), "window", "0"),
        (lambda: ClipFractionRule(fraction=1.0), "fraction", "1.0"),
        (lambda: UpdateRatioRule(low=-1.0), "low", "-1.0"),
        (lambda: UpdateRatioRule(steps=-1), "steps", "-1"),
        (lambda: UpdateRatioRule(low=0.2, high=0.1), "high", "0.1"),
        (lambda: IntervalSpikeRule(z_threshold=0), "z_threshold", "0"),
    ],
)
def test_bad_arguments_are_refused_by_name(build, name, value):
    with pytest.raises(ValueError, match=rf"`{name}`.* {name}={value}"):
        build()


@pytest.mark.parametrize(("before", "fires"), [(9, False), (10, True)])
def test_interval_spikes_are_judged_from_the_tenth_summary(before, fires):
    # docs/alerts.md: judged once the history spans `warmup` steps and holds
    # 10 summaries (`min_samples`); summaries every 100 steps span the
    # warm-up at once, so the 10 summaries are what it waits for.
    rule = IntervalSpikeRule()
    for step in range(99, 100 * before, 100):
        assert rule.update(step, _norms(step)) == []
    step = 100 * before + 99
    alerts = rule.update(step, _norms(step, spike_at=step - 50, spike=1e3))
    expected = [("spike", step - 50)] if fires else []
    assert [(a.rule, a.step) for a in alerts] == expected
