"""The value estimate of each agent kind, against its networks computed
apart: max_a Q (DQN, DDQN, C51 as expectations over the support), the
smaller twin critic at the policy's action (SAC, TD3), Q(s, mu(s)) (DDPG)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.agents.categorical_dqn import categorical_dqn_agent
from tf_agents.agents.ddpg import actor_network, critic_network, ddpg_agent
from tf_agents.agents.dqn import dqn_agent
from tf_agents.agents.sac import sac_agent
from tf_agents.agents.td3 import td3_agent
from tf_agents.environments import tf_py_environment
from tf_agents.networks import (
    actor_distribution_network,
    categorical_q_network,
    q_network,
)
from tf_agents.specs import tensor_spec
from tf_agents.utils import common

from keras_gradmon.rl.probes import PolicyProbe, discount_of, time_steps, value_function
from tests.agents.rl.envs import ChainEnv

OBSERVATIONS = np.array(
    [[0.9, 1, 0], [0.5, 3, 1], [0.1, 20, 2], [0.729, 3, 4]], np.float32
)


def _env(continuous):
    return tf_py_environment.TFPyEnvironment(ChainEnv([3], continuous=continuous))


def _batch(agent):
    return time_steps(agent, tf.constant(OBSERVATIONS), tf.ones([4], tf.int32))


def _critics(env):
    spec = (env.observation_spec(), env.action_spec())
    return [critic_network.CriticNetwork(spec, joint_fc_layer_params=(8,),
                                         name=f"critic{i}") for i in (1, 2)]


def _q(critic, observations, actions):
    return critic((observations, actions), training=False)[0].numpy()


def test_dqn_and_ddqn_take_the_largest_q_value():
    env = _env(False)
    for kind in (dqn_agent.DqnAgent, dqn_agent.DdqnAgent):
        network = q_network.QNetwork(env.observation_spec(), env.action_spec(),
                                     fc_layer_params=(8,))
        agent = kind(env.time_step_spec(), env.action_spec(), q_network=network,
                     optimizer=tf.keras.optimizers.Adam(), gamma=0.97)
        got = common.function(value_function(agent))(_batch(agent)).numpy()
        q = network(OBSERVATIONS, training=False)[0].numpy()
        np.testing.assert_allclose(got, q.max(axis=1), rtol=1e-6)
        assert discount_of(agent) == 0.97


def test_c51_takes_the_largest_expected_value():
    env = _env(False)
    network = categorical_q_network.CategoricalQNetwork(
        env.observation_spec(), env.action_spec(), num_atoms=11, fc_layer_params=(8,)
    )
    agent = categorical_dqn_agent.CategoricalDqnAgent(
        env.time_step_spec(), env.action_spec(), categorical_q_network=network,
        optimizer=tf.keras.optimizers.Adam(), min_q_value=-5.0, max_q_value=5.0,
    )
    got = common.function(value_function(agent))(_batch(agent)).numpy()
    logits = network(OBSERVATIONS, training=False)[0].numpy().astype(np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    q = (probs * np.linspace(-5, 5, 11)).sum(-1)
    np.testing.assert_allclose(got, q.max(axis=1), rtol=1e-5, atol=1e-6)


def test_td3_and_ddpg_evaluate_the_critics_at_the_actor_action():
    env = _env(True)
    actor = actor_network.ActorNetwork(env.observation_spec(), env.action_spec(),
                                       fc_layer_params=(8,))
    critics = _critics(env)
    td3 = td3_agent.Td3Agent(
        env.time_step_spec(), env.action_spec(), actor_network=actor,
        critic_network=critics[0], critic_network_2=critics[1],
        actor_optimizer=tf.keras.optimizers.Adam(),
        critic_optimizer=tf.keras.optimizers.Adam(),
    )
    got = common.function(value_function(td3))(_batch(td3)).numpy()
    actions = actor(OBSERVATIONS, training=False)[0]
    q = [_q(td3._critic_network_1, OBSERVATIONS, actions),
         _q(td3._critic_network_2, OBSERVATIONS, actions)]
    np.testing.assert_allclose(got, np.minimum(*q), rtol=1e-6)
    ddpg = ddpg_agent.DdpgAgent(
        env.time_step_spec(), env.action_spec(), actor_network=actor,
        critic_network=critics[0],
        actor_optimizer=tf.keras.optimizers.Adam(),
        critic_optimizer=tf.keras.optimizers.Adam(),
    )
    got = common.function(value_function(ddpg))(_batch(ddpg)).numpy()
    np.testing.assert_allclose(
        got, _q(ddpg._critic_network, OBSERVATIONS, actions), rtol=1e-6
    )
    # Their collect policies add noise and have no action distribution: the
    # probe measures the values only (no entropy, no KL).
    batch = tensor_spec.sample_spec_nest(td3.collect_data_spec, outer_dims=(4, 2))
    probe = PolicyProbe(td3, value_function(td3), None, kl=True)
    numbers, state = probe.before(batch)
    assert sorted(numbers) == ["value/batch_max", "value/batch_mean"]
    assert state == () and probe.after(batch, state) == {}


def test_sac_takes_the_smaller_critic_at_a_policy_sample():
    env = _env(True)
    critics = _critics(env)
    agent = sac_agent.SacAgent(
        env.time_step_spec(), env.action_spec(),
        actor_network=actor_distribution_network.ActorDistributionNetwork(
            env.observation_spec(), env.action_spec(), fc_layer_params=(8,)
        ),
        critic_network=critics[0], critic_network_2=critics[1],
        actor_optimizer=tf.keras.optimizers.Adam(),
        critic_optimizer=tf.keras.optimizers.Adam(),
        alpha_optimizer=tf.keras.optimizers.Adam(),
    )
    agent.initialize()
    tf.random.set_seed(7)
    got = value_function(agent)(_batch(agent)).numpy()
    tf.random.set_seed(7)  # the same sample, drawn again
    actions = agent.policy.action(_batch(agent)).action
    q = [_q(agent._critic_network_1, OBSERVATIONS, actions),
         _q(agent._critic_network_2, OBSERVATIONS, actions)]
    np.testing.assert_allclose(got, np.minimum(*q), rtol=1e-6)
    assert not np.allclose(q[0], q[1])  # two critics, really


def test_other_agents_have_no_value_estimate():
    from tf_agents.agents.behavioral_cloning import behavioral_cloning_agent

    env = _env(False)
    agent = behavioral_cloning_agent.BehavioralCloningAgent(
        env.time_step_spec(), env.action_spec(),
        cloning_network=q_network.QNetwork(env.observation_spec(), env.action_spec()),
        optimizer=tf.keras.optimizers.Adam(),
    )
    assert value_function(agent) is None
    with pytest.raises(ValueError, match=r"`agent` must be a tf-agents agent"):
        from keras_gradmon.rl.monitor import RLHealthMonitor

        RLHealthMonitor(object())
