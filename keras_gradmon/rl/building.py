"""Construction helpers of `RLHealthMonitor`: argument checks and the probe
for the agent's kind."""

from __future__ import annotations

import math
from typing import Any

from keras_gradmon.rl.values import ValueFn


def check_agent(agent: Any) -> None:
    from tf_agents.agents import tf_agent

    if not isinstance(agent, tf_agent.TFAgent):
        raise ValueError(
            "`agent` must be a tf-agents agent (a `tf_agents.agents.TFAgent`). "
            f"Received: agent={agent!r}"
        )


def make_probe(agent: Any, value_fn: ValueFn | None, observer: Any, kl: bool) -> Any:
    from tf_agents.agents.ppo import ppo_agent

    from keras_gradmon.rl.ppo import PPOProbe
    from keras_gradmon.rl.probes import PolicyProbe

    kind = PPOProbe if isinstance(agent, ppo_agent.PPOAgent) else PolicyProbe
    return kind(agent, value_fn, observer, kl)


def finite_numbers(name: str, value: Any) -> list[float]:
    try:
        numbers = [float(v) for v in value] if not isinstance(value, str) else []
    except (TypeError, ValueError):
        numbers = []
    if not numbers or not all(math.isfinite(v) for v in numbers):
        raise ValueError(
            f"`{name}` must be a non-empty sequence of finite numbers. "
            f"Received: {name}={value!r}"
        )
    return numbers
