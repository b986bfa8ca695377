"""The RL alert rules: when each fires, on exact boundaries, and what they
say; bad arguments are refused at construction, by name."""

from __future__ import annotations

import pytest

from keras_gradmon.alerts import AlertEngine
from keras_gradmon.rl.rules import (
    EntropyCollapseRule,
    LowIntensityRule,
    OverestimationRule,
    ReturnCollapseRule,
    ThroughputDropRule,
    default_rl_rules,
)
from tests.doctests import assert_examples_hold


def _fired(rule, points, subject="s"):
    """The steps at which `rule` fires over `[(step, value)]`."""
    return [a.step for step, v in points for a in rule.update(step, {subject: v})]


def test_entropy_collapse_compares_with_the_peak_inside_the_window():
    rule = EntropyCollapseRule(fraction=0.25, window=1000)
    points = [(0, 0.8), (500, 0.6), (900, 0.2), (999, 0.199), (1500, 0.19)]
    # 0.2 is exactly 0.25 * 0.8 (no alert); 0.199 is below; at 1500 the
    # peak inside (500, 1500] is 0.6 and 0.19 > 0.15.
    assert _fired(rule, points) == [999]
    # A first value is its own peak: nothing to fall from.
    assert EntropyCollapseRule(0.5, 100).update(0, {"p": 0.01}) == []


def test_entropy_collapse_message():
    rule = EntropyCollapseRule(fraction=0.5, window=100)
    rule.update(10, {"collect_policy": 0.9})
    (alert,) = rule.update(60, {"collect_policy": 0.3})
    assert alert.message.startswith(
        "WARNING entropy collapse at step 60: entropy of 'collect_policy' = 0.3 "
        "< 0.45 (down from 0.9 at step 10, within 100 steps)."
    )


def test_overestimation_needs_patience_consecutive_summaries():
    rule = OverestimationRule(ratio=2.0, patience=3)
    points = [(1, 2.5), (2, 2.1), (3, 1.9), (4, 2.2), (5, 2.3), (6, 2.0001)]
    assert _fired(rule, points) == [6]
    rule = OverestimationRule(ratio=2.0, patience=1)
    (alert,) = rule.update(7, {"start_states": 2.5})
    assert alert.message.startswith(
        "WARNING value/return overestimation at step 7: value/return of "
        "'start_states' = 2.5 > 2."
    )


def test_low_intensity_below_the_minimum_for_patience_summaries():
    rule = LowIntensityRule(minimum=1.0, patience=2)
    assert _fired(rule, [(1, 0.5), (2, 1.0), (3, 0.99), (4, 0.2), (5, 3)]) == [4]


def test_return_collapse_from_the_running_best():
    rule = ReturnCollapseRule(drop=0.5, baseline=20.0)
    # best 200: fires below 200 - 0.5 * (200 - 20) = 110
    points = [(1, 50.0), (2, 200.0), (3, 110.0), (4, 109.9), (5, 300.0), (6, 150)]
    assert _fired(rule, points) == [4, 6]  # at 6: below 300 - 140 = 160
    rule = ReturnCollapseRule()
    assert _fired(rule, [(1, -10.0), (2, -50.0)]) == []  # never above baseline


def test_return_collapse_tracks_collect_and_evaluation_returns_apart():
    rule = ReturnCollapseRule(drop=0.5)
    assert rule.update(100, {"episodes": 100.0}) == []
    assert rule.update(100, {"evaluation": 200.0}) == []  # same step, fresh
    assert rule.update(100, {"evaluation": 10.0}) == []  # stale: ignored
    fired = rule.update(200, {"episodes": 60.0, "evaluation": 90.0})
    assert [(a.subject, a.threshold) for a in fired] == [("evaluation", 100.0)]


def test_throughput_drop_ignores_one_slow_interval():
    rule = ThroughputDropRule(drop=0.5, history=3, patience=2)
    points = [(1, 100.0), (2, 110.0), (3, 90.0), (4, 20.0), (5, 100.0), (6, 40.0)]
    assert _fired(rule, points) == []  # each dip lasted one summary
    assert _fired(rule, [(7, 40.0), (8, 49.0)]) == [7, 8]
    assert _fired(rule, [(9, 60.0)]) == []


def test_entropy_collapse_peak_counts_while_inside_the_window():
    # window 100: at step 99 the window is (-1, 99], the peak at 0 is in it
    inside = EntropyCollapseRule(fraction=0.5, window=100)
    assert _fired(inside, [(0, 0.8), (99, 0.39)]) == [99]
    # at step 100 it is (0, 100]: the peak at 0 is out, 0.39 its own peak
    edge = EntropyCollapseRule(fraction=0.5, window=100)
    assert _fired(edge, [(0, 0.8), (100, 0.39)]) == []


@pytest.mark.parametrize(
    ("rule", "bad", "limit"),
    [
        (OverestimationRule(ratio=2.0, patience=3), 2.5, 2.0),
        (LowIntensityRule(minimum=1.0, patience=3), 0.5, 1.0),
    ],
)
def test_streak_rules_fire_exactly_at_patience_and_while_it_holds(rule, bad, limit):
    # patience 3: not after 2 breaches, at the 3rd and each one after; the
    # limit itself is no breach and starts the count again
    points = [(1, bad), (2, bad), (3, limit), (4, bad), (5, bad), (6, bad)]
    points += [(7, bad), (8, limit), (9, bad)]
    assert _fired(rule, points) == [6, 7]


def test_a_summary_without_the_ratio_neither_breaks_nor_extends_the_row():
    engine = AlertEngine({"over": OverestimationRule(ratio=2.0, patience=3)})
    over = {"value/return": {"start_states": 2.5}}
    fired = [
        a.step
        for step, metrics in [(1, over), (2, {}), (3, over), (4, {}), (5, over)]
        for a in engine.update(step, metrics)
    ]
    assert fired == [5]  # the third measured summary, at step 5
    (alert,) = engine.history
    assert "'start_states' = 2.5 > 2 for 3 summaries. Hint" in alert.message


def test_return_collapse_needs_a_best_above_the_baseline():
    at_baseline = ReturnCollapseRule(drop=0.5, baseline=10.0)
    assert _fired(at_baseline, [(1, 10.0), (2, 0.0)]) == []  # no progress made
    above = ReturnCollapseRule(drop=0.5, baseline=10.0)
    # best 10.5: fires below 10.5 - 0.5 * 0.5 = 10.25
    assert _fired(above, [(1, 10.5), (2, 10.25), (3, 10.24)]) == [3]


def test_return_collapse_on_evaluations_only():
    rule = ReturnCollapseRule(drop=0.5, subjects="evaluation")
    assert rule.update(1, {"episodes": 100.0, "evaluation": 100.0}) == []
    fired = rule.update(2, {"episodes": 10.0, "evaluation": 49.0})
    assert [(a.subject, a.threshold) for a in fired] == [("evaluation", 50.0)]


def test_throughput_drop_judges_once_history_normal_summaries_are_kept():
    rule = ThroughputDropRule(drop=0.5, history=3, patience=2)
    # one normal summary short of `history` at step 3: no median to judge
    # against, so 10 is normal (it joins them), and step 4 is the first slow
    assert _fired(rule, [(1, 100.0), (2, 100.0), (3, 10.0), (4, 10.0)]) == []
    # median of 100, 100, 10 is 100: step 5 is the second slow in a row
    assert _fired(rule, [(5, 10.0)]) == [5]


def test_throughput_drop_fires_with_exactly_history_normal_summaries():
    rule = ThroughputDropRule(drop=0.5, history=3, patience=2)
    # exactly half the median (50) is normal; 49 is slow, twice at step 6
    points = [(1, 100.0), (2, 100.0), (3, 100.0), (4, 50.0), (5, 49.0), (6, 49.0)]
    assert _fired(rule, points) == [6]
    (alert,) = rule.update(7, {"s": 10.0})
    assert (alert.threshold, alert.details["median"]) == (50.0, 100.0)


@pytest.mark.parametrize(
    "build, name, value",
    [
        (lambda: EntropyCollapseRule(fraction=0), "fraction", "0"),
        (lambda: EntropyCollapseRule(window=0), "window", "0"),
        (lambda: OverestimationRule(ratio=1), "ratio", "1"),
        (lambda: OverestimationRule(patience=-1), "patience", "-1"),
        (lambda: LowIntensityRule(minimum=-1), "minimum", "-1"),
        (lambda: ReturnCollapseRule(drop=1.5), "drop", "1.5"),
        (lambda: ReturnCollapseRule(baseline="x"), "baseline", "'x'"),
        (lambda: ThroughputDropRule(history=0), "history", "0"),
    ],
)
def test_bad_arguments_are_refused_by_name(build, name, value):
    with pytest.raises(ValueError, match=rf"`{name}` .* Received: {name}={value}$"):
        build()


def test_default_rules_read_the_metrics_the_monitor_feeds():
    engine = AlertEngine(default_rl_rules())
    metrics = {
        "entropy": {"collect_policy": 0.9},
        "value/return": {"start_states": 3.0},
        "training intensity": {"replay": 0.5},
        "return": {"episodes": 200.0},
        "env steps/s": {"collection": 1000.0},
    }
    # At the RL monitor's default frequency, a summary every 1,000 steps.
    assert engine.update(1000, metrics) == []
    engine.update(2000, metrics)
    fired = engine.update(
        3000,
        {
            **metrics,
            "entropy": {"collect_policy": 0.1},
            "return": {"episodes": 50.0},
        },
    )
    assert sorted(a.title for a in fired) == [
        "entropy collapse",
        "return collapse",
        "training intensity low",
        "value/return overestimation",
    ]


@pytest.mark.parametrize(
    "module",
    [
        "keras_gradmon.rl.monitor",
        "keras_gradmon.rl.rules",
    ],
)
def test_docstring_examples_hold(module):
    assert_examples_hold(module)


@pytest.mark.parametrize(
    ("rule", "bad", "span"),
    [
        ("value_overestimation", ("value/return", "start_states", 2.5), 2000),
        ("low_intensity", ("training intensity", "replay", 0.5), 1000),
    ],
)
@pytest.mark.parametrize("every", [1, 100, 1000])
def test_default_streaks_span_the_same_steps_at_every_frequency(rule, bad, span, every):
    # Breached from step 0 on, summaries every `every` steps: the default
    # rule fires first at step `span` (and after its summaries in a row),
    # whatever the frequency; a streak of one summary at every step (a
    # replay buffer's prefill) says nothing.
    _, subject, value = bad
    fresh = default_rl_rules()[rule]
    first = next(
        step
        for step in range(0, 5 * span, every)
        if fresh.update(step, {subject: value})
    )
    assert first == max(span, (fresh.patience - 1) * every)


def test_default_throughput_drop_spans_1000_steps_at_every_step():
    rule = default_rl_rules()["throughput_drop"]
    for step in range(5):
        assert rule.update(step, {"collection": 100.0}) == []
    slow = [
        a for step in range(5, 2000) for a in rule.update(step, {"collection": 10.0})
    ]
    assert slow[0].step == 1005
    assert " for 1001 summaries since step 5 (median 100 before)" in slow[0].message
