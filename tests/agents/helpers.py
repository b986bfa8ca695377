"""A small DqnAgent on a synthetic batch, monitored or not."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.utils import common

import keras_gradmon

OBS = tensor_spec.TensorSpec([6], tf.float32)
ACTIONS = tensor_spec.BoundedTensorSpec([], tf.int64, 0, 2)
BATCH = 8


def make_agent(
    monitored: bool,
    counter_aggregation: tf.VariableAggregation = tf.VariableAggregation.NONE,
    **options: Any,
) -> tuple[dqn_agent.DqnAgent, Any]:
    """A DqnAgent with fixed initial weights, and its optimizer.

    The monitor's step is the agent's (int64) `train_step_counter` unless
    `step=` is among `options`. Under a strategy tf-agents needs the counter
    aggregated `ONLY_FIRST_REPLICA` (`counter_aggregation`).
    """
    tf.random.set_seed(0)
    network = q_network.QNetwork(OBS, ACTIONS, fc_layer_params=(16, 8))
    optimizer = tf.keras.optimizers.Adam(1e-2)
    counter = tf.Variable(0, dtype=tf.int64, aggregation=counter_aggregation)
    if monitored:
        options.setdefault("step", counter)
        optimizer = keras_gradmon.GradientMonitorOptimizer(optimizer, **options)
    agent = dqn_agent.DqnAgent(
        ts.time_step_spec(OBS),
        ACTIONS,
        q_network=network,
        optimizer=optimizer,
        td_errors_loss_fn=common.element_wise_squared_loss,
        train_step_counter=counter,
    )
    agent.initialize()
    return agent, optimizer


def make_batch(seed: int = 0) -> trajectory.Trajectory:
    """A `[BATCH, 2]` trajectory batch of random transitions."""
    rng = np.random.default_rng(seed)
    return trajectory.Trajectory(
        step_type=tf.zeros([BATCH, 2], tf.int32),
        observation=tf.constant(rng.normal(size=(BATCH, 2, 6)).astype("float32")),
        action=tf.constant(rng.integers(0, 3, (BATCH, 2))),
        policy_info=(),
        next_step_type=tf.ones([BATCH, 2], tf.int32),
        reward=tf.constant(rng.normal(size=(BATCH, 2)).astype("float32")),
        discount=tf.ones([BATCH, 2]),
    )


def loss_gradients(agent: dqn_agent.DqnAgent, experience: Any) -> dict[str, np.ndarray]:
    """`{variable name: gradient}` of the DQN loss, computed apart from training."""
    variables = agent._q_network.trainable_weights
    with tf.GradientTape() as tape:
        loss = agent._loss(experience, training=True).loss
    grads = tape.gradient(loss, variables)
    return {v.name[:-2]: g.numpy() for v, g in zip(variables, grads)}
