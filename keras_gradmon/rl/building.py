"""Construction helpers of `RLHealthMonitor`: argument checks, the writer,
the probe for the agent's kind."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from keras_gradmon import _validation
from keras_gradmon.rl.values import ValueFn


def check_agent(agent: Any) -> None:
    from tf_agents.agents import tf_agent

    if not isinstance(agent, tf_agent.TFAgent):
        raise ValueError(
            "`agent` must be a tf-agents agent (a `tf_agents.agents.TFAgent`). "
            f"Received: agent={agent!r}"
        )


def optional(name: str, value: Any, check: Callable[[str, Any], Any]) -> Any:
    return None if value is None else check(name, value)


def callable_or_none(name: str, value: Any) -> Any:
    if not callable(value):
        raise ValueError(
            f"`{name}` must be callable or None. Received: {name}={value!r}"
        )
    return value


def make_writer(log_dir: str | None, writer: Any) -> Any:
    if log_dir is not None:
        log_dir = _validation.non_empty_string("log_dir", log_dir)
        return tf.summary.create_file_writer(log_dir)
    if writer is not None and not hasattr(writer, "as_default"):
        raise ValueError(
            "`writer` must be a `tf.summary` writer (from "
            f"`tf.summary.create_file_writer`). Received: writer={writer!r}"
        )
    return writer


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
