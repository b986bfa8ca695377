"""One hub, three monitors of a tf-agents DQN run: the gradient writer, the
activation monitor and the RL health monitor publish to one hub, and a
recorder written as one class (tests/test_hub.py) receives all of them."""

from __future__ import annotations

import numpy as np
import pytest

import keras_gradmon
from keras_gradmon.hub import Hub
from keras_gradmon.rl.monitor import RLHealthMonitor, RLOptions
from keras_gradmon.writer import MonitorWriter
from tests.activations.models import reference_statistics
from tests.agents.helpers import loss_gradients, make_agent, make_batch
from tests.test_hub import CsvRecorder, read_csv


def test_gradient_activation_and_rl_numbers_reach_one_recorder(tmp_path):
    agent, optimizer = make_agent(True, every_n_steps=2)
    experience = make_batch()
    grads = loss_gradients(agent, experience)  # at step 0's weights
    x = np.random.default_rng(2).normal(size=(32, 6)).astype("float32")
    first = agent._q_network._encoder._postprocessing_layers[1]
    hidden = first(agent._q_network._encoder._postprocessing_layers[0](x)).numpy()
    hub = Hub([CsvRecorder(tmp_path / "all.csv")])
    writer = MonitorWriter(optimizer.monitor, hub=hub, label="dqn")
    activations = keras_gradmon.ActivationMonitor(
        agent._q_network, x, every_n_steps=2, hub=hub
    )
    health = RLHealthMonitor(agent, RLOptions(every_n_steps=2), hub=hub, kl=False)
    for _ in range(4):
        activations.update(agent.train_step_counter)
        health.train(experience)
        writer.write()
    hub.close()
    rows = read_csv(tmp_path / "all.csv")
    norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values()))
    assert rows["grad_norm/global"].keys() == {0, 2}
    assert float(rows["grad_norm/global"][0]) == pytest.approx(norm, rel=2e-5)
    layer = activations.layer_names[0]
    assert rows[f"activation_std/{layer}"].keys() == {0, 2}
    assert float(rows[f"activation_std/{layer}"][0]) == pytest.approx(
        reference_statistics(hidden, "relu")["std"], rel=2e-6
    )
    assert rows["rl/progress/train_steps"] == {0: "0.0", 2: "2.0"}
    assert health.options.kl is False and health.options.every_n_steps == 2


def test_unknown_option_names_the_argument_and_its_value():
    agent, _ = make_agent(False)
    with pytest.raises(
        TypeError,
        match=r"RLHealthMonitor got an unknown argument "
        r"every_n_step=5; its options are: env_batch_size, ",
    ):
        RLHealthMonitor(agent, every_n_step=5)
