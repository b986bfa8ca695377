"""The wrapper in CategoricalDqnAgent and PpoAgent train steps."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from tf_agents.agents.categorical_dqn import categorical_dqn_agent
from tf_agents.agents.ppo import ppo_clip_agent
from tf_agents.networks import (
    actor_distribution_network,
    categorical_q_network,
    value_network,
)
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.utils import common

import keras_gradmon
from tests.agents.helpers import ACTIONS, OBS, make_batch
from tests.reference import load_events, scalar_series


def test_categorical_dqn(tmp_path):
    tf.random.set_seed(0)
    counter = tf.Variable(0, dtype=tf.int64)
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        tf.keras.optimizers.Adam(1e-3), every_n_steps=1, step=counter
    )
    agent = categorical_dqn_agent.CategoricalDqnAgent(
        ts.time_step_spec(OBS),
        ACTIONS,
        categorical_q_network=categorical_q_network.CategoricalQNetwork(
            OBS, ACTIONS, fc_layer_params=(8,)
        ),
        optimizer=optimizer,
        train_step_counter=counter,
    )
    agent.initialize()
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        common.function(agent.train)(make_batch())
    writer.flush()
    norms = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    assert list(norms) == [0]
    assert norms[0] == np.float32(optimizer.snapshot().totals["grad_norm"])
    assert norms[0] > 0


def test_ppo_clip(tmp_path):
    # Continuous actions: tf-agents 0.19's CategoricalProjectionNetwork fails
    # under NumPy 2 (int() of a 1-element array).
    actions = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0)
    tf.random.set_seed(0)
    counter = tf.Variable(0, dtype=tf.int64)
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        tf.keras.optimizers.Adam(1e-3), every_n_steps=1, step=counter
    )
    time_step_spec = ts.time_step_spec(OBS)
    agent = ppo_clip_agent.PPOClipAgent(
        time_step_spec,
        actions,
        optimizer=optimizer,
        actor_net=actor_distribution_network.ActorDistributionNetwork(
            OBS, actions, fc_layer_params=(8,)
        ),
        value_net=value_network.ValueNetwork(OBS, fc_layer_params=(8,)),
        num_epochs=2,
        train_step_counter=counter,
    )
    agent.initialize()
    batch, steps = 4, 3
    experience = tensor_spec.sample_spec_nest(
        agent.collect_data_spec, seed=0, outer_dims=(batch, steps)
    )
    mid = tf.fill([batch, steps], ts.StepType.MID)
    experience = experience._replace(
        step_type=mid, next_step_type=mid, discount=tf.ones([batch, steps])
    )
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        common.function(agent.train)(experience)
    writer.flush()
    norms = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    assert sorted(norms) == [0, 1]  # one apply_gradients per epoch
    assert norms[1] == np.float32(optimizer.snapshot().totals["grad_norm"])
