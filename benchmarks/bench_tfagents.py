"""Cost of keras_gradmon on a tf-agents DQN train step, beside tf-agents' own
`summarize_grads_and_vars` (the peer baseline `peer_overhead_tfagents.py`).

A DqnAgent with a (256, 256) QNetwork, batch 64, `common.function(agent.train)`
under a default summary writer; interleaved repetitions of 300 train steps
(9 by default):

  plain      summarize_grads_and_vars=False, unwrapped Adam: the baseline.
  plain-again  plain again, an agent of its own: its ratio to plain is the
             run's noise.
  tfagents   summarize_grads_and_vars=True (a histogram and a norm per
             variable, every step, not rate-limited): measured 5.4x by peers.
  every1     GradientMonitorOptimizer, all statistics and histograms every
             step, written from inside the step.       Target <= 2.0x.
  every100   the same every 100 steps, `common.function(agent.train)`.
  every100d  statistics every 100 steps, the rest at the defaults
             (histograms every 1,000), `common.function(agent.train)`.
  every100h  the same, `keras_gradmon.integrations.tf_agents.function(
             agent.train)`: traced measuring and not, chosen on the host
             at each call.                              Target <= 1.02x.
  idle       statistics never due (only the per-step gate): what a step
             that records nothing costs.

Run from the repository root on an otherwise idle machine:

    TF_USE_LEGACY_KERAS=1 .venv/bin/python benchmarks/bench_tfagents.py --markdown
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import tempfile

import numpy as np
import tensorflow as tf
from _timing import format_table, interleaved_times, summarize
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.utils import common

import keras_gradmon
from keras_gradmon.integrations import tf_agents as gradmon_agents

OBS = tensor_spec.TensorSpec([32], tf.float32)
ACTIONS = tensor_spec.BoundedTensorSpec([], tf.int64, 0, 5)
EVERY100 = {"every_n_steps": 100, "histogram_every_n_steps": 100}
VARIANTS = {
    "plain": (False, None),
    # plain again, an agent of its own: its ratio to plain is this
    # machine's noise, the resolution of every other ratio of the run.
    "plain-again": (False, None),
    "tfagents": (True, None),
    "every1": (False, {"every_n_steps": 1, "histogram_every_n_steps": 1}),
    "every100": (False, EVERY100),
    "every100d": (False, {"every_n_steps": 100}),
    "every100h": (False, EVERY100, True),
    "idle": (False, {"every_n_steps": 10**9, "histogram_every_n_steps": None}),
}
TARGETS = {"every1": 2.0, "every100": 1.02, "every100d": 1.02, "every100h": 1.02}


def make_train(summarize_grads: bool, monitor: dict | None, host: bool = False):
    tf.random.set_seed(0)
    optimizer = tf.keras.optimizers.Adam(1e-3)
    if monitor is not None:
        optimizer = keras_gradmon.GradientMonitorOptimizer(optimizer, **monitor)
    agent = dqn_agent.DqnAgent(
        ts.time_step_spec(OBS),
        ACTIONS,
        q_network=q_network.QNetwork(OBS, ACTIONS, fc_layer_params=(256, 256)),
        optimizer=optimizer,
        td_errors_loss_fn=common.element_wise_squared_loss,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
        summarize_grads_and_vars=summarize_grads,
    )
    agent.initialize()
    if host:
        return gradmon_agents.function(agent.train)
    return common.function(agent.train)


def experience(batch: int = 64) -> trajectory.Trajectory:
    rng = np.random.default_rng(0)
    return trajectory.Trajectory(
        step_type=tf.zeros([batch, 2], tf.int32),
        observation=tf.constant(rng.normal(size=(batch, 2, 32)).astype("float32")),
        action=tf.constant(rng.integers(0, 6, (batch, 2))),
        policy_info=(),
        next_step_type=tf.ones([batch, 2], tf.int32),
        reward=tf.constant(rng.normal(size=(batch, 2)).astype("float32")),
        discount=tf.ones([batch, 2]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    variants = {name: VARIANTS[name] for name in args.variants.split(",")}
    exp = experience()
    log_root = tempfile.mkdtemp(prefix="bench_tfa_")
    # One writer per variant, as one log directory per run: two monitors
    # never write unscoped tags to one writer (keras_gradmon refuses).
    writers = {
        name: tf.summary.create_file_writer(os.path.join(log_root, name))
        for name in variants
    }
    trains = {}
    for name, spec in variants.items():
        with writers[name].as_default():
            trains[name] = make_train(*spec)

    def unit(name: str):
        def run() -> None:
            with writers[name].as_default():
                for _ in range(args.steps):
                    trains[name](exp)

        return run

    units = {name: unit(name) for name in trains}
    for name in trains:
        with writers[name].as_default():
            for _ in range(20):
                trains[name](exp)  # trace and warm up
    cpu: dict = {}
    times = interleaved_times(units, args.reps, cpu)
    rows = summarize(times, "plain", TARGETS, cpu)
    rows = [{"model": "dqn", **row} for row in rows]
    print(format_table(rows))
    if args.markdown:
        print()
        print(format_table(rows, markdown=True))


if __name__ == "__main__":
    main()
