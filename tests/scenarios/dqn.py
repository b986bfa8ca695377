"""The DQN CartPole example (`examples/dqn_cartpole.py`), judged with every
monitor's default rules: gradient statistics and activations every step.

Needs `TF_USE_LEGACY_KERAS=1` before TensorFlow is imported (a process of
its own).

Example:

>>> outcome = cartpole(iterations=3000, log_dir="/tmp/dqn")  # doctest: +SKIP
>>> outcome.false_alarms  # doctest: +SKIP
[]
"""

from __future__ import annotations

import importlib.util
import pathlib
import types

from tests.scenarios.running import Outcome, console

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "dqn_cartpole.py"


def example() -> types.ModuleType:
    """The example, imported from its file."""
    spec = importlib.util.spec_from_file_location("dqn_cartpole", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cartpole(
    iterations: int = 3000, log_dir: str = "/tmp/dqn", summary_every: int = 1,
    seed: int = 0,
) -> Outcome:
    """Trains the example's agent for `iterations` steps, gradient
    statistics and activations every step and RL health every
    `summary_every`; every alert of the three monitors."""
    with console(Outcome("DQN CartPole", iterations, None)) as outcome:
        monitors = example().train(
            iterations, log_dir, seed, summary_every=summary_every,
            eval_every=max(iterations // 6, 1), every_n_steps=1,
        )
        outcome.alerts.extend(monitors.alerts())
    outcome.final_loss = monitors.health.latest.get("eval/return_mean")
    return outcome
