"""`keras_gradmon.watch` on tf-agents agents: every optimizer the agent holds
wrapped in place, recording against its `train_step_counter`, written by
`Watch.write()` after each `agent.train`; scopes when it holds several. And
`RLHealthMonitor(options=...)`, deprecated, still works."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import keras_gradmon
from keras_gradmon import RLHealthMonitor, RLOptions
from keras_gradmon.wrapping import MonitoredOptimizer
from tests.agents.helpers import (
    AGENT_CASES,
    OPTIMIZER_KINDS,
    build_case_agent,
    case_batch,
    loss_gradients,
    make_agent,
    make_batch,
)
from tests.agents.rl.helpers import chain_dqn
from tests.reference import load_events, scalar_series


def _norm(arrays) -> float:
    return float(
        np.linalg.norm(np.concatenate([np.ravel(a).astype(np.float64) for a in arrays]))
    )


def test_dqn_optimizer_is_wrapped_and_written_at_its_train_steps(tmp_path):
    agent, inner = make_agent(monitored=False)
    expected = _norm(loss_gradients(agent, make_batch(0)).values())
    watched = keras_gradmon.watch(agent, str(tmp_path), every_n_steps=2)
    assert isinstance(agent._optimizer, MonitoredOptimizer)
    assert watched.optimizers == [agent._optimizer]
    assert agent._optimizer.inner_optimizer is inner
    fresh = []
    for seed in range(5):
        agent.train(make_batch(seed))
        fresh.append(watched.write())
    watched.close()
    assert int(agent.train_step_counter.numpy()) == 5
    assert fresh == [True, False, True, False, True]
    events = load_events(str(tmp_path))
    norms = scalar_series(events, "grad_norm/global")
    assert norms.keys() == {0, 2, 4}
    assert norms[0] == pytest.approx(expected, rel=1e-5)
    assert scalar_series(events, "alerts/nonfinite") == {0: 0.0, 2: 0.0, 4: 0.0}
    assert watched.alerts == []


def test_an_actor_critic_agent_gets_one_scope_per_optimizer(tmp_path):
    case = AGENT_CASES["DdpgAgent"]
    agent = build_case_agent(case, "tf_keras", deterministic=True)
    experience = case_batch(case, agent, seed=0)
    # The critic's step-0 gradient: DDPG applies the critic's update first.
    variables = agent._critic_network.trainable_variables
    with tf.GradientTape() as tape:
        loss = case.losses[0][1](agent, experience)
    expected = _norm([g.numpy() for g in tape.gradient(loss, variables)])

    watched = keras_gradmon.watch(agent, str(tmp_path), every_n_steps=1)
    assert watched.optimizers == [agent._actor_optimizer, agent._critic_optimizer]
    assert [o.monitor.config.tag_scope for o in watched.optimizers] == [
        "actor",
        "critic",
    ]
    for batch in (experience, case_batch(case, agent, seed=1)):
        agent.train(batch)
        watched.write()
    watched.close()
    events = load_events(str(tmp_path))
    norms = {
        scope: scalar_series(events, f"grad_norm/{scope}/global")
        for scope in ("actor", "critic")
    }
    assert norms["actor"].keys() == norms["critic"].keys() == {0, 1}
    assert norms["critic"][0] == pytest.approx(expected, rel=1e-5)
    tags = events.Tags()["tensors"]
    assert "grad_norm/global" not in tags
    assert {"alerts/actor/nonfinite", "alerts/critic/nonfinite"} <= set(tags)


def test_rl_health_monitor_options_keyword_is_deprecated_and_works(tmp_path):
    agent = chain_dqn()[0]
    options = RLOptions(every_n_steps=10, log_dir=str(tmp_path))
    with pytest.warns(DeprecationWarning) as caught:
        monitor = RLHealthMonitor(agent, options=options)
    (warning,) = [w for w in caught if w.category is DeprecationWarning]
    assert "RLHealthMonitor(options=...) is deprecated" in str(warning.message)
    assert "RLHealthMonitor(agent, config=...)" in str(warning.message)
    assert warning.filename == __file__
    assert monitor.options is options
    monitor.record_evaluation([200.0, 180.0], step=100)
    monitor.close()
    events = load_events(str(tmp_path))
    assert scalar_series(events, "rl/eval/return_mean") == {100: 190.0}


@pytest.mark.parametrize("kind", sorted(OPTIMIZER_KINDS))
def test_a_fresh_agent_of_every_optimizer_kind_is_watched(kind, tmp_path):
    case = AGENT_CASES["DqnAgent"]
    agent = build_case_agent(case, kind)
    inner = agent._optimizer
    watched = keras_gradmon.watch(agent, str(tmp_path), every_n_steps=1)
    assert agent._optimizer.inner_optimizer is inner
    agent.train(case_batch(case, agent, seed=0))
    assert watched.write()
    watched.close()
    norms = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    assert norms.keys() == {0} and np.isfinite(norms[0]) and norms[0] > 0


@pytest.mark.parametrize("kind", sorted(OPTIMIZER_KINDS))
def test_an_agent_whose_optimizer_trained_already_is_refused(kind):
    case = AGENT_CASES["DqnAgent"]
    agent = build_case_agent(case, kind)
    inner = agent._optimizer
    agent.train(case_batch(case, agent, seed=0))
    with pytest.raises(ValueError) as raised:
        keras_gradmon.watch(agent)
    message = str(raised.value)
    assert message.startswith("`agent.optimizer` has trained already")
    assert f"Received: agent.optimizer={inner!r}" in message
    assert agent._optimizer is inner


def test_activations_of_an_agent_are_refused_saying_what_to_use():
    case = AGENT_CASES["DqnAgent"]
    agent = build_case_agent(case, sorted(OPTIMIZER_KINDS)[0])
    inner = agent._optimizer
    with pytest.raises(ValueError, match=r"`activations` is for a Keras model.*"
                       r"ActivationMonitor.*Received: activations=ndarray"):
        keras_gradmon.watch(agent, activations=np.zeros((4, 4), "float32"))
    assert agent._optimizer is inner  # left as it was
