"""The tf_keras wrapper in real DqnAgent train steps."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.utils import common

import keras_gradmon
from keras_gradmon.legacy.tf_keras import TfKerasGradientMonitorOptimizer
from tests.agents.helpers import loss_gradients, make_agent, make_batch
from tests.reference import load_events, scalar_series


def test_is_a_tf_keras_optimizer():
    wrapper = keras_gradmon.GradientMonitorOptimizer(tf.keras.optimizers.Adam(1e-3))
    assert isinstance(wrapper, TfKerasGradientMonitorOptimizer)
    assert isinstance(wrapper, tf.keras.optimizers.legacy.Optimizer)
    assert float(wrapper.learning_rate) == pytest.approx(1e-3)


def test_rejects_a_non_optimizer():
    with pytest.raises(ValueError, match="inner_optimizer"):
        TfKerasGradientMonitorOptimizer("adam")


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_training_is_bit_identical(mode):
    experience = make_batch()
    weights = []
    for monitored in (False, True):
        agent, _ = make_agent(monitored, every_n_steps=2, histogram_every_n_steps=3)
        train = agent.train if mode == "eager" else common.function(agent.train)
        for _ in range(4):
            train(experience)
        weights.append([v.numpy() for v in agent._q_network.trainable_weights])
    for plain, monitored in zip(*weights):
        np.testing.assert_array_equal(plain, monitored)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_summaries_written_inside_train(tmp_path, mode):
    experience = make_batch()
    agent, optimizer = make_agent(True, every_n_steps=2, histogram_every_n_steps=4)
    expected = {}
    train = agent.train if mode == "eager" else common.function(agent.train)
    writer = tf.summary.create_file_writer(str(tmp_path))
    for step in range(5):
        expected[step] = loss_gradients(agent, experience)
        with writer.as_default():
            train(experience)
    writer.flush()
    events = load_events(str(tmp_path))
    norms = scalar_series(events, "grad_norm/global")
    assert sorted(norms) == [0, 2, 4]
    for step, value in norms.items():
        grads = expected[step]
        want = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values()))
        assert value == pytest.approx(want, rel=1e-5)
        for name, grad in grads.items():
            series = scalar_series(events, f"grad_norm/{name}")
            assert series[step] == pytest.approx(np.linalg.norm(grad), rel=1e-5)
    assert sorted(scalar_series(events, "grad_missing/global")) == [0, 2, 4]
    tags = events.Tags()["tensors"]
    hist_tags = [t for t in tags if t.startswith("grad_hist/")]
    assert hist_tags
    assert sorted(e.step for e in events.Tensors(hist_tags[0])) == [0, 4]
    assert optimizer.snapshot().step == 4


def test_int32_counter_is_refused_at_construction():
    # tf-agents 0.19's DqnAgent cannot use an int32 train_step_counter (its
    # loss summaries convert the step to int64): the wrapper says so when the
    # counter reaches it, with the fix.
    counter = tf.Variable(0, dtype=tf.int32)
    with pytest.raises(ValueError, match=r"dtype=tf\.int64"):
        make_agent(True, step=counter, every_n_steps=2)


def test_clipping_and_checkpoint(tmp_path):
    experience = make_batch()
    clipping = {"method": "global_norm", "max_norm": 0.1}
    agent, optimizer = make_agent(True, every_n_steps=1, clipping=clipping)
    train = common.function(agent.train)
    writer = tf.summary.create_file_writer(str(tmp_path / "logs"))
    with writer.as_default():
        train(experience)
    writer.flush()
    events = load_events(str(tmp_path / "logs"))
    pre = scalar_series(events, "clip/pre_norm")[0]
    post = scalar_series(events, "clip/post_norm")[0]
    assert pre > 0.1 and post == pytest.approx(0.1)
    assert scalar_series(events, "clip/scale")[0] == pytest.approx(post / pre)

    # The monitor's state is saved and restored with the agent.
    snapshot = optimizer.snapshot()
    path = tf.train.Checkpoint(agent=agent).save(str(tmp_path / "ckpt"))
    train(experience)
    assert optimizer.snapshot().step == 1
    tf.train.Checkpoint(agent=agent).restore(path).assert_existing_objects_matched()
    restored = optimizer.snapshot()
    assert restored.step == snapshot.step == 0
    np.testing.assert_array_equal(restored.grad, snapshot.grad)
