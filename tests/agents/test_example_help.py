"""`examples/dqn_cartpole.py --help`: the module's docstring as the
description, and every default (issue 29, section 3)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import pathlib
import re

import pytest

from keras_gradmon.report.rl import group_key

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "dqn_cartpole.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("dqn_cartpole", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _help(example) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as done:
        example.parser().parse_args(["--help"])
    assert done.value.code == 0
    return printed.getvalue()


def test_help_shows_the_description_and_the_defaults(example):
    text = " ".join(_help(example).split())  # argparse wraps the options
    assert "DQN on CartPole with tf-agents, monitored by keras_gradmon." in text
    assert "--iterations ITERATIONS training iterations" in text
    assert "(default: 3000)" in text and "(default: 0)" in text
    assert "(default: /tmp/keras_gradmon_dqn/dqn_seed0)" in text
    args = example.parser().parse_args([])
    assert (args.iterations, args.seed) == (3000, 0)


def test_help_keeps_the_shell_example_as_written(example):
    text = _help(example)
    assert "\n    for seed in 0 1 2; do\n" in text
    continued = "--seed $seed \\\n          --log-dir /tmp/keras_gradmon_dqn/"
    assert continued + "dqn_seed$seed\n" in text


def test_the_help_group_regex_puts_the_seeds_in_one_group(example):
    pattern = re.search(r"--group '([^']+)'", example.__doc__).group(1)
    keys = {group_key(re.search(pattern, f"dqn_seed{seed}"))[0] for seed in range(3)}
    assert keys == {"dqn"}
