"""tf-agents' own v2 DQN example (`tf_agents/agents/dqn/examples/v2/
train_eval.py`), run as shipped, with its optimizer (a
`tf.compat.v1.train.AdamOptimizer` it creates itself) monitored through the
public API: the `DqnAgent` the example constructs is
`keras_gradmon.integrations.tf_agents.monitored(DqnAgent, ...)`."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import summary_ops_v2
from tf_agents.agents.dqn import dqn_agent
from tf_agents.agents.dqn.examples.v2 import train_eval

from keras_gradmon.integrations.tf_agents import monitored
from keras_gradmon.legacy.tf_v1 import V1GradientMonitorOptimizer
from tests.reference import load_events, scalar_series

#: A few iterations of the example, small everywhere; summaries every 3 steps.
TINY = {
    "num_iterations": 7,
    "fc_layer_params": (8,),
    "initial_collect_steps": 10,
    "replay_buffer_capacity": 100,
    "batch_size": 4,
    "num_eval_episodes": 1,
    "eval_interval": 1000,
    "train_checkpoint_interval": 1000,
    "policy_checkpoint_interval": 1000,
    "rb_checkpoint_interval": 1000,
    "log_interval": 1000,
    "summary_interval": 3,
    "use_tf_functions": True,
}


@pytest.fixture
def default_writer_restored():
    """The example sets its train writer as the process's default
    (`set_as_default()`) and leaves it there; put the previous one back."""
    previous = summary_ops_v2._summary_state.writer
    yield
    summary_ops_v2._summary_state.writer = previous


def test_dqn_example_runs_monitored(tmp_path, monkeypatch, default_writer_restored):
    agents = []
    monitored_dqn = monitored(dqn_agent.DqnAgent, every_n_steps=2)

    def make_agent(*args, **kwargs):
        agent = monitored_dqn(*args, **kwargs)
        agents.append(agent)
        return agent

    # The example's own reference to the module, not the module: DqnAgent's
    # constructor calls `super(DqnAgent, self)`, which must stay the class.
    monkeypatch.setattr(train_eval, "dqn_agent", SimpleNamespace(DqnAgent=make_agent))
    tf.keras.utils.set_random_seed(0)
    train_eval.train_eval(str(tmp_path), **TINY)
    tf.summary.flush()  # the example's writer, still the default

    (agent,) = agents
    wrapper = agent._optimizer
    assert isinstance(wrapper, V1GradientMonitorOptimizer)
    assert isinstance(wrapper.inner_optimizer, tf.compat.v1.train.AdamOptimizer)
    assert wrapper is agent.optimizer_monitor
    assert int(agent.train_step_counter) == 7
    events = load_events(str(tmp_path / "train"))
    tags = set(events.Tags()["tensors"])
    assert {"Losses/td_loss", "Metrics/AverageReturn"} <= tags  # the example's own
    # Statistics every 2 steps (the monitor), written where the example records
    # summaries (`record_if(global_step % 3 == 0)`): steps 0 and 6 of 0..6.
    norms = scalar_series(events, "grad_norm/global")
    assert sorted(norms) == [0, 6]
    assert all(np.isfinite(v) and v > 0 for v in norms.values())
    snapshot = wrapper.snapshot()
    assert snapshot.step == 6
    assert norms[6] == np.float32(snapshot.totals["grad_norm"])
    for path, value in snapshot.grad_stat("norm").items():
        series = scalar_series(events, f"grad_norm/{path}")
        assert sorted(series) == [0, 6]
        assert series[6] == np.float32(value)
