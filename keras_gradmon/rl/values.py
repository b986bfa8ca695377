"""Value estimates V(s) of a tf-agents agent, from its own networks.

| agent | V(s) |
|---|---|
| DqnAgent, DdqnAgent, CategoricalDqnAgent | `max_a Q(s, a)` (C51: the Q-values are the expectations over the support) |
| SacAgent (and CQL-SAC), Td3Agent | `min(Q1, Q2)(s, a)`, `a` from the agent's policy |
| DdpgAgent | `Q(s, mu(s))` |
| PPOAgent | the value network's `V(s)` |
| ReinforceAgent with a value network | its `V(s)` |

Any other agent: pass `value_fn=` to `RLHealthMonitor`.
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

#: `value_fn(time_step) -> [N]`: the value estimate of each of N states.
ValueFn = Callable[[Any], tf.Tensor]


def time_steps(agent: Any, observation: Any, step_type: tf.Tensor) -> Any:
    """A TimeStep batch for the agent's policies (reward 0, discount 1)."""
    from tf_agents.trajectories import time_step as ts

    spec = agent.time_step_spec
    outer = tf.shape(step_type)

    def filled(leaf_spec: Any, value: float) -> tf.Tensor:
        shape = tf.concat([outer, tf.constant(leaf_spec.shape.as_list(), tf.int32)], 0)
        return tf.fill(shape, tf.constant(value, leaf_spec.dtype))

    return ts.TimeStep(
        step_type=step_type,
        reward=tf.nest.map_structure(lambda s: filled(s, 0.0), spec.reward),
        discount=filled(spec.discount, 1.0),
        observation=observation,
    )


def _outer_max(values: tf.Tensor) -> tf.Tensor:
    return tf.reduce_max(tf.reshape(values, [tf.shape(values)[0], -1]), axis=1)


def _q_agent(agent: Any) -> ValueFn:
    q_policy = agent.policy.wrapped_policy

    def value(time_step: Any) -> tf.Tensor:
        logits = q_policy.distribution(time_step).action.logits_parameter()
        return _outer_max(logits)

    return value


def _critic_agent(agent: Any, critics: list[Any]) -> ValueFn:
    def value(time_step: Any) -> tf.Tensor:
        action = agent.policy.action(time_step).action
        inputs = (time_step.observation, action)
        q = [
            critic(inputs, step_type=time_step.step_type, training=False)[0]
            for critic in critics
        ]
        return tf.reshape(tf.reduce_min(tf.stack(q), axis=0), [-1])

    return value


def _ppo_agent(agent: Any) -> ValueFn:
    policy = agent.collect_policy

    def value(time_step: Any) -> tf.Tensor:
        state = policy.get_initial_value_state(tf.shape(time_step.step_type)[0])
        values, _ = policy.apply_value_network(
            time_step.observation, time_step.step_type, value_state=state,
            training=False,
        )
        return values

    return value


def value_function(agent: Any) -> ValueFn | None:
    """The value estimate of `agent`'s kind (see the table above), or None.

    Example:

    >>> value = value_function(dqn_agent)  # doctest: +SKIP
    >>> value(time_steps(dqn_agent, observations, step_types))  # doctest: +SKIP
    """
    from tf_agents.agents.ddpg import ddpg_agent
    from tf_agents.agents.dqn import dqn_agent
    from tf_agents.agents.ppo import ppo_agent
    from tf_agents.agents.reinforce import reinforce_agent
    from tf_agents.agents.sac import sac_agent
    from tf_agents.agents.td3 import td3_agent

    if isinstance(agent, dqn_agent.DqnAgent):  # DDQN and C51 too
        return _q_agent(agent)
    if isinstance(agent, (sac_agent.SacAgent, td3_agent.Td3Agent)):
        return _critic_agent(agent, [agent._critic_network_1, agent._critic_network_2])
    if isinstance(agent, ddpg_agent.DdpgAgent):
        return _critic_agent(agent, [agent._critic_network])
    if isinstance(agent, ppo_agent.PPOAgent):
        return _ppo_agent(agent)
    if isinstance(agent, reinforce_agent.ReinforceAgent) and agent._value_network:
        network = agent._value_network
        return lambda time_step: network(
            time_step.observation, step_type=time_step.step_type, training=False
        )[0]
    return None


def discount_of(agent: Any) -> float | None:
    """The agent's discount factor (gamma), or None when it has none."""
    for name in ("_gamma", "_discount_factor"):
        value = getattr(agent, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None
