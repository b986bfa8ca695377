"""examples/dqn_cartpole.py writes the RL health next to the gradients, and
the report reads it back."""

from __future__ import annotations

import importlib.util
import pathlib

from keras_gradmon.cli import main as cli
from tests.reference import load_events, scalar_series

EXAMPLE = pathlib.Path(__file__).parents[3] / "examples" / "dqn_cartpole.py"


def test_dqn_cartpole_example(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("dqn_cartpole", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    health = module.main(
        iterations=120, log_dir=str(tmp_path), summary_every=40, eval_every=60,
        eval_episodes=1,
    )
    events = load_events(str(tmp_path))
    steps = scalar_series(events, "rl/progress/train_steps")
    assert sorted(steps) == [0, 40, 80]
    env_steps = scalar_series(events, "rl/progress/env_steps")
    assert env_steps[80] == 100 + 81  # prefill, then one step per iteration
    assert health.latest["progress/training_intensity"] == 64 * 80 / 181
    assert sorted(scalar_series(events, "rl/eval/episodes")) == [60, 120]
    tags = set(events.Tags()["tensors"])
    for name in ("episode/return_mean", "value/overestimation", "policy/kl",
                 "policy/entropy_fraction", "progress/env_steps_per_sec"):
        assert f"rl/{name}" in tags
    assert "grad_norm/global" in tags  # the gradients, in the same run
    assert cli(["report", str(tmp_path), "--no-plots"]) == 0
    out = capsys.readouterr().out
    # A log directory without run folders is labelled by its own name.
    label = f"== {tmp_path.name} [rl] =="
    assert "RL training health (1 agent(s))" in out and label in out
