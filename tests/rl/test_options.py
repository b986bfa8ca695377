"""RLOptions: RLHealthMonitor's options, validated without an agent (and
without TensorFlow)."""

import subprocess
import sys

import pytest

from keras_gradmon import defaults
from keras_gradmon.alerts.delivery import AlertOptions
from keras_gradmon.alerts.incidents import DEFAULT_FOLD_STEPS
from keras_gradmon.rl.monitor import RLOptions
from keras_gradmon.rl.rules import MIN_EPISODES, LowIntensityRule, ReturnCollapseRule
from keras_gradmon.validation import UnknownOptionError, with_overrides


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        ({"env_batch_size": 0}, "env_batch_size=0"),
        ({"every_n_steps": 0}, "every_n_steps=0"),
        ({"window": 0}, "window=0"),
        ({"kl": "yes"}, "kl='yes'"),
        ({"value_fn": 3}, "value_fn=3"),
        ({"train_batch_size": -1}, "train_batch_size=-1"),
        ({"tag_scope": ""}, "tag_scope=''"),
        ({"cooldown_steps": -1}, "cooldown_steps=-1"),
        ({"actions": {"fatal": "stop"}}, "unknown tier 'fatal'"),
    ],
)
def test_bad_options_name_the_argument(options, shown):
    with pytest.raises(ValueError, match=shown):
        RLOptions(**options)


def test_overrides_replace_fields_and_unknown_ones_are_named():
    base = RLOptions(every_n_steps=500, solve_threshold=195.0)
    assert (base.window, base.every_n_steps) == (defaults.RL_WINDOW, 500)
    changed = with_overrides(RLOptions, base, {"window": 10}, "RLHealthMonitor")
    assert (changed.window, changed.solve_threshold, base.window) == (10, 195.0, 100)
    with pytest.raises(UnknownOptionError, match=r"unknown argument windows=10;"):
        with_overrides(RLOptions, base, {"windows": 10}, "RLHealthMonitor")
    with pytest.raises(ValueError, match=r"`options` must be a RLOptions"):
        with_overrides(RLOptions, {"window": 10}, {}, "RLHealthMonitor")


def test_rl_options_import_no_tensorflow():
    code = "import sys, keras_gradmon.rl.monitor; print('tensorflow' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("fold_steps", [0, -5, 2.5, True, "100"])
def test_fold_steps_is_refused_as_the_gradient_checkers_refuse_it(fold_steps):
    message = (
        f"`fold_steps` must be a positive integer. Received: fold_steps={fold_steps!r}"
    )
    with pytest.raises(ValueError) as rl:
        RLOptions(fold_steps=fold_steps)
    with pytest.raises(ValueError) as gradient:  # GradientAlertCallback's check
        AlertOptions(fold_steps=fold_steps)
    assert str(rl.value) == str(gradient.value) == message


def test_fold_steps_defaults_to_the_checkers_default_and_takes_none():
    assert RLOptions().fold_steps == DEFAULT_FOLD_STEPS == 100
    assert RLOptions(fold_steps=None).fold_steps is None
    assert RLOptions(fold_steps=1).fold_steps == 1


def test_a_window_that_never_keeps_min_episodes_is_refused_with_the_return_rule():
    short = MIN_EPISODES - 1
    message = (
        f"`window` must be at least {MIN_EPISODES} while a rule reads the "
        "collect return (ReturnCollapseRule): it is judged once "
        f"{MIN_EPISODES} episodes are kept, and a window of {short} never "
        "keeps them. Raise `window`, or judge the evaluations only "
        '(`ReturnCollapseRule(subjects="evaluation")`), or leave the rule out '
        f"of `rules`. Received: window={short}"
    )
    for rules in (None, [ReturnCollapseRule()], {"r": ReturnCollapseRule(0.3)}):
        with pytest.raises(ValueError) as refused:
            RLOptions(window=short, rules=rules)
        assert str(refused.value) == message
    # exactly MIN_EPISODES kept is enough; without a collect-return rule any
    # window is fine
    assert RLOptions(window=MIN_EPISODES).window == MIN_EPISODES
    assert RLOptions(window=1, rules=[LowIntensityRule()]).window == 1
    evaluations = ReturnCollapseRule(subjects="evaluation")
    assert RLOptions(window=1, rules=[evaluations]).window == 1
    assert RLOptions(window=1, rules=[]).engine().rules == {}


def test_bad_rules_are_refused_by_the_options():
    with pytest.raises(ValueError, match=r"Received: rules='entropy'$"):
        RLOptions(rules="entropy")
