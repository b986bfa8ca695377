"""Two wrapped optimizers in one SacAgent: SAC's conversion, scoped tags."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from tf_agents.agents.ddpg import critic_network
from tf_agents.agents.sac import sac_agent
from tf_agents.networks import actor_distribution_network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.utils import common

import keras_gradmon
from keras_gradmon.integrations.tf_agents import convert_like_sac
from tests.reference import load_events, scalar_series

OBS = tensor_spec.TensorSpec([4], tf.float32)
ACTIONS = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0)
BATCH = 8


def _batch() -> trajectory.Trajectory:
    rng = np.random.default_rng(1)
    return trajectory.Trajectory(
        step_type=tf.zeros([BATCH, 2], tf.int32),
        observation=tf.constant(rng.normal(size=(BATCH, 2, 4)).astype("float32")),
        action=tf.constant(rng.uniform(-1, 1, (BATCH, 2, 2)).astype("float32")),
        policy_info=(),
        next_step_type=tf.ones([BATCH, 2], tf.int32),
        reward=tf.constant(rng.normal(size=(BATCH, 2)).astype("float32")),
        discount=tf.ones([BATCH, 2]),
    )


def _sac(actor_opt, critic_opt, counter) -> sac_agent.SacAgent:
    return sac_agent.SacAgent(
        ts.time_step_spec(OBS),
        ACTIONS,
        critic_network=critic_network.CriticNetwork(
            (OBS, ACTIONS), joint_fc_layer_params=(8,)
        ),
        actor_network=actor_distribution_network.ActorDistributionNetwork(
            OBS, ACTIONS, fc_layer_params=(8,)
        ),
        actor_optimizer=actor_opt,
        critic_optimizer=critic_opt,
        alpha_optimizer=tf.keras.optimizers.Adam(1e-3),
        train_step_counter=counter,
    )


def test_two_scoped_wrappers_survive_sac(tmp_path):
    tf.random.set_seed(0)
    counter = tf.Variable(0, dtype=tf.int64)
    actor_opt, critic_opt = (
        convert_like_sac(
            keras_gradmon.GradientMonitorOptimizer(
                tf.keras.optimizers.Adam(1e-3),
                tag_scope=scope,
                step=counter,
                every_n_steps=1,
            )
        )
        for scope in ("actor", "critic")
    )
    agent = _sac(actor_opt, critic_opt, counter)
    agent.initialize()
    # SAC converts new-style optimizers to legacy ones; `convert_like_sac`
    # did the same inside the wrappers, which SAC leaves alone.
    assert agent._actor_optimizer is actor_opt
    assert agent._critic_optimizer is critic_opt
    assert isinstance(actor_opt.inner_optimizer, tf.keras.optimizers.legacy.Adam)

    train = common.function(agent.train)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        for _ in range(2):
            train(_batch())
    writer.flush()
    events = load_events(str(tmp_path))
    tags = set(events.Tags()["tensors"])
    actor = {t for t in tags if t.split("/")[1:2] == ["actor"]}
    critic = {t for t in tags if t.split("/")[1:2] == ["critic"]}
    assert "grad_norm/actor/global" in actor
    assert "grad_norm/critic/global" in critic
    assert not actor & critic
    for scope, optimizer in (("actor", actor_opt), ("critic", critic_opt)):
        norms = scalar_series(events, f"grad_norm/{scope}/global")
        assert sorted(norms) == [0, 1]
        assert norms[1] == np.float32(optimizer.snapshot().totals["grad_norm"])


def test_td3_actor_and_critic_wrappers_with_groups(tmp_path):
    from tf_agents.agents.ddpg import actor_network
    from tf_agents.agents.td3 import td3_agent

    tf.random.set_seed(0)
    counter = tf.Variable(0, dtype=tf.int64)
    actor_opt = keras_gradmon.GradientMonitorOptimizer(
        tf.keras.optimizers.Adam(1e-3),
        tag_scope="actor",
        every_n_steps=1,
        groups={"actor_mlp": "ActorNetwork"},
    )
    critic_opt = keras_gradmon.GradientMonitorOptimizer(
        tf.keras.optimizers.Adam(1e-3),
        tag_scope="critic",
        every_n_steps=1,
        groups={"critic_mlp": "CriticNetwork"},
    )
    agent = td3_agent.Td3Agent(
        ts.time_step_spec(OBS),
        ACTIONS,
        actor_network=actor_network.ActorNetwork(OBS, ACTIONS, fc_layer_params=(8,)),
        critic_network=critic_network.CriticNetwork(
            (OBS, ACTIONS), joint_fc_layer_params=(8,)
        ),
        actor_optimizer=actor_opt,
        critic_optimizer=critic_opt,
        train_step_counter=counter,
        actor_update_period=1,
    )
    agent.initialize()
    train = common.function(agent.train)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        for _ in range(3):
            train(_batch())
    writer.flush()
    events = load_events(str(tmp_path))
    assert sorted(scalar_series(events, "grad_norm/actor/actor_mlp")) == [0, 1, 2]
    assert sorted(scalar_series(events, "grad_norm/critic/critic_mlp")) == [0, 1, 2]
    critic_norms = scalar_series(events, "grad_norm/critic/global")
    assert critic_norms[2] == critic_opt.snapshot().totals["grad_norm"]
