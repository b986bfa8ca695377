"""A DqnAgent on the chain environment whose Q-network is set to the true
value (times `scale`), frozen (learning rate 0), with its driver and data."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.drivers import dynamic_step_driver
from tf_agents.environments import tf_py_environment
from tf_agents.networks import q_network
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.utils import common

from tests.agents.rl.envs import ChainEnv

GAMMA = 0.9
REWARD = 1.0
LENGTHS = (3, 5, 2, 4)
BATCH = 16


def true_value(gamma_left: np.ndarray) -> np.ndarray:
    """V = r (1 - gamma**left) / (1 - gamma), from the observation's first
    entry (gamma**left, float32), in float64."""
    return REWARD * (1.0 - np.asarray(gamma_left, np.float64)) / (1.0 - GAMMA)


def chain_dqn(scale: float = 1.0, counter_dtype=tf.int64, epsilon: float = 0.1):
    """`(agent, env, buffer)`; Q(s, a) = scale * V(s) for both actions."""
    env = tf_py_environment.TFPyEnvironment(
        ChainEnv(LENGTHS, lambda e, t: REWARD, GAMMA)
    )
    network = q_network.QNetwork(
        env.observation_spec(), env.action_spec(), fc_layer_params=None
    )
    agent = dqn_agent.DqnAgent(
        env.time_step_spec(),
        env.action_spec(),
        q_network=network,
        optimizer=tf.keras.optimizers.SGD(0.0),
        epsilon_greedy=epsilon,
        gamma=GAMMA,
        td_errors_loss_fn=common.element_wise_squared_loss,
        train_step_counter=tf.Variable(0, dtype=counter_dtype),
    )
    agent.initialize()
    slope = REWARD / (1.0 - GAMMA)
    kernel = np.zeros((3, 2), np.float32)
    kernel[0, :] = -scale * slope
    network.layers[-1].set_weights([kernel, np.full(2, scale * slope, np.float32)])
    agent._target_q_network.set_weights(network.get_weights())
    buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=1, max_length=1000
    )
    return agent, env, buffer


def collect(env, agent, observers):
    """A one-step driver under common.function."""
    driver = dynamic_step_driver.DynamicStepDriver(
        env, agent.collect_policy, observers=observers, num_steps=1
    )
    driver.run = common.function(driver.run)
    return driver
