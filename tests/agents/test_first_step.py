"""The first step of tf-agents code: AutoGraph converts none of the
library's functions behind the tf_keras and `tf.compat.v1.train` wrappers,
and `integrations.tf_agents.function` (a measuring and a non-measuring
trace, chosen on the host) trains and records as `common.function` does."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.utils import common

import keras_gradmon
from keras_gradmon.integrations import tf_agents as gradmon_agents
from tests.agents.helpers import make_agent, make_batch
from tests.reference import load_events, scalar_series
from tests.test_tracing import converted_calls, library_calls

OPTIMIZERS = {
    "tf_keras": lambda: tf.keras.optimizers.Adam(1e-3),
    "tf_v1": lambda: tf.compat.v1.train.AdamOptimizer(1e-3),
}
ENTRY = {
    "tf_keras": "TfKerasGradientMonitorOptimizer.apply_gradients",
    "tf_v1": "V1GradientMonitorOptimizer.apply_gradients",
}


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_autograph_converts_no_library_function(kind, tmp_path):
    tf.random.set_seed(0)
    layer = tf.keras.layers.Dense(3)
    layer.build((None, 4))
    counter = tf.Variable(0, dtype=tf.int64)
    optimizer = keras_gradmon.wrap(
        OPTIMIZERS[kind](), step=counter, every_n_steps=1, histogram_every_n_steps=1
    )

    @tf.function  # AutoGraph on, in a file: as a user's own train step
    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(layer(x) ** 2)
        grads = tape.gradient(loss, layer.trainable_variables)
        optimizer.apply_gradients(zip(grads, layer.trainable_variables))
        counter.assign_add(1)
        return loss

    writer = tf.summary.create_file_writer(str(tmp_path))
    with converted_calls() as calls, writer.as_default():
        train_step(tf.ones((2, 4)))
    assert library_calls(calls) == {ENTRY[kind]}
    writer.flush()
    assert sorted(scalar_series(load_events(str(tmp_path)), "grad_norm/global")) == [0]


def _train(make_train, tmp_path, steps: int = 7):
    agent, optimizer = make_agent(True, every_n_steps=3, histogram_every_n_steps=6)
    train = make_train(agent)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        for i in range(steps):
            train(make_batch(seed=i))
    writer.flush()
    weights = [v.numpy() for v in agent._q_network.trainable_variables]
    return weights, load_events(str(tmp_path)), optimizer


def test_host_choice_trains_and_records_as_common_function(tmp_path):
    plain, plain_events, _ = _train(
        lambda agent: common.function(agent.train), tmp_path / "common"
    )
    chosen, events, optimizer = _train(
        lambda agent: gradmon_agents.function(agent.train), tmp_path / "host"
    )
    for a, b in zip(plain, chosen, strict=True):
        np.testing.assert_array_equal(a, b)
    for tag in ("grad_norm/global", "weight_norm/global"):
        want = scalar_series(plain_events, tag)
        assert sorted(want) == [0, 3, 6]
        assert scalar_series(events, tag) == want
    hist = [t for t in events.Tags()["tensors"] if t.startswith("grad_hist/")]
    assert hist and sorted(e.step for e in events.Tensors(hist[0])) == [0, 6]
    assert optimizer.snapshot().step == 6


def test_host_choice_reads_the_steps_only_near_a_due_step(tmp_path):
    # A read waits for the previous step: only the calls near a due step
    # read (and every 64th); the due steps still measure.
    agent, optimizer = make_agent(True, every_n_steps=50, histogram_every_n_steps=None)
    train = gradmon_agents.function(agent.train)
    writer = tf.summary.create_file_writer(str(tmp_path))
    batch = make_batch()
    with writer.as_default():
        for _ in range(52):
            train(batch)
    writer.flush()
    assert sorted(scalar_series(load_events(str(tmp_path)), "grad_norm/global")) == [
        0,
        50,
    ]
    # Calls 1 (step 0) and 2 (just after a due step); call 51, the first
    # whose reach from call 2's read holds step 50, and call 52 (just after).
    assert train.reads == 4
    assert optimizer.snapshot().step == 50


def test_host_choice_traces_the_monitor_out_of_steps_not_due():
    agent, _ = make_agent(True, every_n_steps=100)
    train = gradmon_agents.function(agent.train)
    experience = make_batch()
    plain_agent, _ = make_agent(False)
    plain = common.function(plain_agent.train)

    def ops(function) -> set[str]:
        graph = function.get_concrete_function(experience).graph
        return {op.type for op in graph.get_operations()}

    # The step that is not due has the unwrapped step's ops only (not its
    # IdentityN: the wrapper sums the replicas' gradients itself): no
    # conditional, no statistics; the measuring one has the conditional.
    assert ops(train.unmeasured) <= ops(plain)
    assert ops(train.measured) & {"Case", "StatelessCase", "If", "StatelessIf"}


def test_host_choice_needs_a_monitored_agent():
    agent, _ = make_agent(False)
    with pytest.raises(ValueError, match="train"):
        gradmon_agents.function(agent.train)
