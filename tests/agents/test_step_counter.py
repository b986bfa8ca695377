"""A step counter that is not int64 is refused where it reaches the wrapper:
tf-agents' own summaries need an int64 `train_step_counter` and fail with
the tutorials' `tf.Variable(0)` as soon as a summary writer is set."""

from __future__ import annotations

import pytest
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.utils import common

import keras_gradmon
from keras_gradmon.integrations.tf_agents import monitored
from tests.agents.helpers import make_batch

OBS = tensor_spec.TensorSpec([6], tf.float32)
ACTIONS = tensor_spec.BoundedTensorSpec([], tf.int64, 0, 2)
OPTIMIZERS = {
    "tf_keras": lambda: tf.keras.optimizers.Adam(1e-3),
    "tf_keras_legacy": lambda: tf.keras.optimizers.legacy.Adam(1e-3),
    "tf_v1": lambda: tf.compat.v1.train.AdamOptimizer(1e-3),
}


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_wrap_refuses_an_int32_step(kind):
    counter = tf.Variable(0)  # int32, as in tf-agents' tutorials
    with pytest.raises(ValueError) as error:
        keras_gradmon.wrap(OPTIMIZERS[kind](), step=counter)
    message = str(error.value)
    assert "`step` must be an int64 tf.Variable" in message
    assert "Received: step=<tf.Variable" in message and "dtype=int32" in message
    assert "tf.Variable(0, dtype=tf.int64)" in message


def test_monitored_refuses_an_int32_train_step_counter():
    agent_class = monitored(dqn_agent.DqnAgent, every_n_steps=1)
    with pytest.raises(ValueError, match="`train_step_counter` must be an int64"):
        agent_class(
            ts.time_step_spec(OBS),
            ACTIONS,
            q_network=q_network.QNetwork(OBS, ACTIONS, fc_layer_params=(8,)),
            optimizer=tf.keras.optimizers.Adam(1e-3),
            train_step_counter=tf.Variable(0),
        )


def test_the_unwrapped_agent_fails_with_an_int32_counter_under_a_writer(tmp_path):
    # What the error prevents: tf-agents itself, with no wrapper at all.
    agent = dqn_agent.DqnAgent(
        ts.time_step_spec(OBS),
        ACTIONS,
        q_network=q_network.QNetwork(OBS, ACTIONS, fc_layer_params=(8,)),
        optimizer=tf.keras.optimizers.Adam(1e-3),
        train_step_counter=tf.Variable(0),
    )
    agent.initialize()
    train = common.function(agent.train)
    errors = (TypeError, ValueError, tf.errors.InvalidArgumentError)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default(), pytest.raises(errors):
        train(make_batch())


def test_an_int64_counter_trains_under_a_writer(tmp_path):
    counter = tf.Variable(0, dtype=tf.int64)
    agent = monitored(dqn_agent.DqnAgent, every_n_steps=1)(
        ts.time_step_spec(OBS),
        ACTIONS,
        q_network=q_network.QNetwork(OBS, ACTIONS, fc_layer_params=(8,)),
        optimizer=tf.keras.optimizers.Adam(1e-3),
        train_step_counter=counter,
    )
    agent.initialize()
    with tf.summary.create_file_writer(str(tmp_path)).as_default():
        common.function(agent.train)(make_batch())
    assert int(counter) == 1
