"""PPO: tf-agents' own KL, the approximate KL, the clip fraction and the
explained variance, against NumPy float64 from the networks' outputs.

Continuous actions: tf-agents 0.19's CategoricalProjectionNetwork fails
under NumPy 2 (`int()` of a 1-element array), as tests/agents notes.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.agents.ppo import ppo_clip_agent, ppo_utils
from tf_agents.drivers import dynamic_step_driver
from tf_agents.environments import tf_py_environment
from tf_agents.networks import actor_distribution_network, value_network
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.utils import common

from keras_gradmon.rl.monitor import RLHealthMonitor
from tests.agents.rl.envs import ChainEnv

STEPS = 24


def _ppo():
    tf.random.set_seed(1)
    env = tf_py_environment.TFPyEnvironment(
        ChainEnv([3, 5, 4], gamma=0.9, continuous=True)
    )
    actor = actor_distribution_network.ActorDistributionNetwork(
        env.observation_spec(), env.action_spec(), fc_layer_params=(8,)
    )
    critic = value_network.ValueNetwork(env.observation_spec(), fc_layer_params=(8,))
    agent = ppo_clip_agent.PPOClipAgent(
        env.time_step_spec(),
        env.action_spec(),
        optimizer=tf.keras.optimizers.Adam(0.05),
        actor_net=actor,
        value_net=critic,
        num_epochs=3,
        normalize_observations=False,
        normalize_rewards=False,
        discount_factor=0.9,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
    )
    agent.initialize()
    return env, agent


def _weighted(values, weights):
    return np.sum(weights * values) / np.sum(weights)


def _normal(distribution_params):
    loc = np.asarray(distribution_params["loc"], np.float64)
    return loc, np.asarray(distribution_params["scale"], np.float64)


def _log_prob(loc, scale, x):
    z = (x - loc) / scale
    return np.sum(-0.5 * z**2 - np.log(scale) - 0.5 * np.log(2 * np.pi), axis=-1)


def _collect(env, agent, monitor):
    buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=1, max_length=STEPS
    )
    driver = dynamic_step_driver.DynamicStepDriver(
        env, agent.collect_policy, [buffer.add_batch, monitor.observer], num_steps=STEPS
    )
    common.function(driver.run)()
    return buffer.gather_all()


def test_ppo_numbers_against_numpy(tmp_path):
    env, agent = _ppo()
    monitor = RLHealthMonitor(agent, every_n_steps=1, log_dir=str(tmp_path))
    experience = _collect(env, agent, monitor)
    processed = agent._preprocess(experience)  # as PPO's train does first
    weights = ppo_utils.make_trajectory_mask(processed).numpy().astype(np.float64)
    returns = processed.policy_info["return"].numpy().astype(np.float64)
    values = processed.policy_info["value_prediction"].numpy().astype(np.float64)
    monitor.train_fn = common.function(agent.train)
    loss_info = monitor.train(experience)
    latest = monitor.latest

    error = returns - values
    mean_e, mean_r = _weighted(error, weights), _weighted(returns, weights)
    explained = 1 - _weighted((error - mean_e) ** 2, weights) / _weighted(
        (returns - mean_r) ** 2, weights
    )
    assert latest["policy/explained_variance"] == pytest.approx(explained, rel=1e-4)
    old_loc, old_scale = _normal(experience.policy_info["dist_params"])
    after = agent._actor_net(
        experience.observation, step_type=experience.step_type, network_state=()
    )[0]
    new_loc = after.mean().numpy().astype(np.float64)
    new_scale = after.stddev().numpy().astype(np.float64)
    kl = np.sum(
        np.log(new_scale / old_scale)
        + (old_scale**2 + (old_loc - new_loc) ** 2) / (2 * new_scale**2)
        - 0.5,
        axis=-1,
    )
    assert kl.max() > 1e-4  # the update moved the policy
    assert latest["policy/kl"] == pytest.approx(_weighted(kl, weights), rel=1e-3)
    actions = experience.action.numpy().astype(np.float64)
    log_r = _log_prob(new_loc, new_scale, actions) - _log_prob(
        old_loc, old_scale, actions
    )
    approx = _weighted(np.expm1(log_r) - log_r, weights)
    assert latest["policy/approx_kl"] == pytest.approx(approx, rel=1e-3)
    assert latest["policy/clip_fraction"] == float(loss_info.extra.clip_fraction)
    entropy = np.sum(0.5 * np.log(2 * np.pi * np.e * old_scale**2), axis=-1)
    want = _weighted(entropy, weights)
    assert latest["policy/entropy"] == pytest.approx(want, rel=1e-5)
    assert "policy/entropy_fraction" not in latest  # continuous: no maximum
    assert latest["progress/train_steps"] == 0 and int(agent.train_step_counter) == 3
    assert monitor._per_call == 3  # one train call, three epochs
