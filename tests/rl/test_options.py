"""RLOptions: RLHealthMonitor's options, validated without an agent (and
without TensorFlow)."""

import subprocess
import sys

import pytest

from keras_gradmon import defaults
from keras_gradmon.options import UnknownOptionError, with_overrides
from keras_gradmon.rl.options import RLOptions


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
    code = "import sys, keras_gradmon.rl.options; print('tensorflow' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
