"""Agents whose optimizers the user wrapped without names, under one default
`tf.summary` writer: the first optimizer to write keeps unscoped tags, each
other one gets a tag scope derived from the networks it trains, the same
each time the agent is built (other layer uids); announced once."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.util import tensor_util
from tf_agents.utils import common

import keras_gradmon
from tests.agents.helpers import (
    AGENT_CASES,
    OPTIMIZER_KINDS,
    case_batch,
    construct,
)
from tests.reference import load_events, scalar_series

#: The scope of each optimizer argument, in the order the train step
#: applies them (None: unscoped, the first to write).
EXPECTED = {
    "SacAgent": {
        "critic_optimizer": None,
        "actor_optimizer": "ActorDistributionNetwork",
        "alpha_optimizer": "initial_log_alpha",
    },
    "Td3Agent": {"critic_optimizer": None, "actor_optimizer": "ActorNetwork"},
    "PPOClipAgent": {"optimizer": None},
}
LEAN = {
    "every_n_steps": 1,
    "statistics": ("norm",),
    "weight_statistics": False,
    "histogram_every_n_steps": None,
}
# Writers stay referenced until the process ends: claims are keyed by
# `id(writer)` (see test_matrix.py).
_WRITERS: list = []


def _agent(name: str, kind: str) -> tuple[Any, dict]:
    """`name`'s agent, each optimizer wrapped by `keras_gradmon.wrap` with no
    name, and the wrappers by argument."""
    case = AGENT_CASES[name]
    counter = tf.Variable(0, dtype=tf.int64)
    optimizers = {
        argument: keras_gradmon.wrap(OPTIMIZER_KINDS[kind](), step=counter, **LEAN)
        for argument, _ in case.losses
    }
    return construct(case, optimizers, counter), optimizers


def _train(agents: list, log_dir: Any, steps: int = 2, graph: bool = True) -> None:
    """Trains each agent `steps` steps in its `common.function` (or eagerly)
    under one writer on `log_dir`."""
    writer = tf.summary.create_file_writer(str(log_dir))
    _WRITERS.append(writer)
    with writer.as_default():
        for agent in agents:
            train = common.function(agent.train) if graph else agent.train
            case = AGENT_CASES[type(agent).__name__]
            for seed in range(steps):
                train(case_batch(case, agent, seed))
    writer.flush()


def _scopes(optimizers: dict) -> dict:
    return {argument: o.monitor.tags.scope for argument, o in optimizers.items()}


def _global_tag(scope: str | None) -> str:
    return f"grad_norm/{scope}/global" if scope else "grad_norm/global"


#: SacAgent with both kinds; Td3Agent with tf_keras (its scopes with v1 are
#: those of `test_scopes_of_two_agents_under_one_writer`; the scopes come from
#: the networks' variables, the same for every kind).
SCOPE_CELLS = [("SacAgent", "v1"), ("SacAgent", "tf_keras"), ("Td3Agent", "tf_keras")]


@pytest.mark.parametrize("name, kind", SCOPE_CELLS)
def test_each_optimizer_gets_the_scope_of_its_networks(name, kind, tmp_path):
    scopes = []
    # Built again in the same process: other uids. The rebuilt agent trains
    # eagerly (no second trace): the scope comes from the networks'
    # variables, made when the agent is built, either way.
    for run in range(2):
        agent, optimizers = _agent(name, kind)
        _train([agent], tmp_path / str(run), graph=run == 0)
        scopes.append(_scopes(optimizers))
        events = load_events(str(tmp_path / str(run)))
        norms = [scalar_series(events, _global_tag(s)) for s in scopes[-1].values()]
        assert all(list(series) == [0, 1] for series in norms)
        # Distinct optimizers, distinct series.
        assert len({tuple(series.values()) for series in norms}) == len(norms)
    assert scopes[0] == scopes[1] == EXPECTED[name]


def test_scopes_of_two_agents_under_one_writer(tmp_path, caplog):
    td3, td3_optimizers = _agent("Td3Agent", "v1")
    ppo, ppo_optimizers = _agent("PPOClipAgent", "tf_keras")
    with caplog.at_level(logging.INFO, logger="keras_gradmon"):
        _train([td3, ppo], tmp_path)
    assert _scopes(td3_optimizers) == EXPECTED["Td3Agent"]
    # PPO's one optimizer trains its actor and its value network.
    ppo_scope = "ActorDistributionNetwork-ValueNetwork"
    assert _scopes(ppo_optimizers) == {"optimizer": ppo_scope}
    events = load_events(str(tmp_path))
    for scope in (None, "ActorNetwork", ppo_scope):
        assert list(scalar_series(events, _global_tag(scope))) == [0, 1]
    # Written once to the log, announced once on the console.
    texts = {}
    for name in events.Tags()["tensors"]:
        if name.startswith("tag_scope/"):
            texts[name] = [
                tensor_util.make_ndarray(e.tensor_proto).ravel()[0].decode()
                for e in events.Tensors(name)
            ]
    assert set(texts) == {"tag_scope/ActorNetwork", f"tag_scope/{ppo_scope}"}
    lines = [r.getMessage() for r in caplog.records if "tag scope" in r.getMessage()]
    assert sorted(lines) == sorted(text for (text,) in texts.values())
    actor = ppo_optimizers["optimizer"]
    (text,) = texts[f"tag_scope/{ppo_scope}"]
    assert repr(actor.name) in text and "ValueNetwork/" in text
    assert "`name=`" in text


def test_the_same_agent_twice_under_one_writer_is_a_true_tie(tmp_path):
    first, _ = _agent("PPOClipAgent", "v1")
    second, _ = _agent("PPOClipAgent", "v1")
    _train([first], tmp_path)
    # Eagerly (no second trace of each): the claims are the same.
    with pytest.raises(ValueError, match=r"unscoped tags to this writer.*`name=`"):
        _train([first, second], tmp_path, graph=False)
    np.testing.assert_equal(first.train_step_counter.numpy(), 4)


def test_eagerly_too(tmp_path):
    agent, optimizers = _agent("SacAgent", "tf_keras_legacy")
    _train([agent], tmp_path, graph=False)
    assert _scopes(optimizers) == EXPECTED["SacAgent"]
    events = load_events(str(tmp_path))
    for scope in EXPECTED["SacAgent"].values():
        assert list(scalar_series(events, _global_tag(scope))) == [0, 1]
    texts = [t for t in events.Tags()["tensors"] if t.startswith("tag_scope/")]
    assert sorted(texts) == [
        "tag_scope/ActorDistributionNetwork",
        "tag_scope/initial_log_alpha",
    ]
