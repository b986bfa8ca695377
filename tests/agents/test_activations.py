"""ActivationMonitor on a tf-agents QNetwork (tf_keras) inside DQN training."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.utils import common

import keras_gradmon
from tests.activations.models import reference_statistics
from tests.agents.helpers import make_agent, make_batch
from tests.reference import load_events, scalar_series


def _observations(n: int = 64) -> np.ndarray:
    return np.random.default_rng(2).normal(size=(n, 6)).astype("float32")


def _encoder_layers(agent):
    return agent._q_network._encoder._postprocessing_layers


def _reference(agent, x):
    """Each hidden Dense layer's output, by calling the layers one by one."""
    out, y = [], x
    for layer in _encoder_layers(agent):
        y = layer(y)
        if type(layer).__name__ == "Dense":
            out.append(y.numpy())
    return out


def test_qnetwork_hidden_layers_match_numpy():
    agent, _ = make_agent(False)
    x = _observations()
    monitor = keras_gradmon.ActivationMonitor(agent._q_network, x)
    dense = [d for d in _encoder_layers(agent) if type(d).__name__ == "Dense"]
    # The relu layers of the encoder, not the linear Q-value head, each
    # named by its kernel's path (`QNetwork/EncodingNetwork/dense_2/kernel:0`).
    paths = [d.kernel.name[: -len("/kernel:0")] for d in dense]
    assert paths[0].startswith("QNetwork/EncodingNetwork/")
    assert monitor.layer_names == paths
    assert [w.activation for w in monitor.watched] == ["relu", "relu"]
    snapshot = monitor.record(0)
    for name, y in zip(monitor.layer_names, _reference(agent, x)):
        expected = reference_statistics(y, "relu")
        for stat in ("mean", "std", "min", "max", "zero_fraction", "dead_fraction"):
            assert snapshot.stat(stat)[name] == pytest.approx(
                expected[stat], rel=2e-6, abs=1e-7
            ), (name, stat)


def test_a_layer_without_variables_is_named_under_its_network():
    agent, _ = make_agent(False)
    (flatten,) = [
        layer
        for layer in _encoder_layers(agent)
        if type(layer).__name__ == "Flatten"
    ]
    dense = next(d for d in _encoder_layers(agent) if type(d).__name__ == "Dense")
    encoder = dense.kernel.name[: -len(f"/{dense.name}/kernel:0")]
    monitor = keras_gradmon.ActivationMonitor(
        agent._q_network, _observations(8), layers=[flatten.name]
    )
    assert encoder == "QNetwork/EncodingNetwork"
    assert monitor.layer_names == [f"{encoder}/{flatten.name}"]


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64])
def test_monitor_follows_dqn_training(tmp_path, dtype):
    # The agent counts in int64 (as tf.summary needs); the activation
    # monitor takes a step of either dtype.
    experience = make_batch()
    counter = tf.Variable(0, dtype=tf.int64)
    step = counter if dtype == tf.int64 else tf.Variable(0, dtype=dtype)
    agent, _ = make_agent(True, every_n_steps=2, step=counter)
    train = common.function(agent.train)
    x = _observations()
    monitor = keras_gradmon.ActivationMonitor(
        agent._q_network, x, every_n_steps=2, log_dir=str(tmp_path)
    )
    expected = {}
    for _ in range(5):
        if int(step) % 2 == 0:
            expected[int(step)] = _reference(agent, x)
        monitor.update(step)
        train(experience)
        counter.assign_add(1)
        if step is not counter:
            step.assign_add(1)
    monitor.flush()
    events = load_events(str(tmp_path))
    first = monitor.layer_names[0]
    series = scalar_series(events, f"activation_std/{first}")
    assert sorted(series) == [0, 2, 4]
    for s, value in series.items():
        want = expected[s][0].astype(np.float64).std()
        assert value == pytest.approx(want, rel=1e-5)
    assert series[0] != series[4]  # training moved the weights


def test_unknown_layer_lists_the_network_layers():
    agent, _ = make_agent(False)
    with pytest.raises(ValueError, match=r"\['encoder'\].*The model's layers: \["):
        keras_gradmon.ActivationMonitor(
            agent._q_network, _observations(4), layers=["encoder"]
        )
