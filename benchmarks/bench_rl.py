"""Cost of keras_gradmon.rl on tf-agents DQN: the train step, and the whole
collect-and-train loop.

Train step (`train` table): the DQN of bench_tfagents.py (a (256, 256)
QNetwork, 6 actions, batch 64 of [64, 2] synthetic trajectories,
`common.function(agent.train)`), `--steps` train steps per repetition:

  plain      `agent.train`: the baseline.
  idle       `RLHealthMonitor.train` with no summary due: what a step that
             records nothing costs.                  Target <= 1.01x plain.
  every100   a summary every 100 train steps.

Host bookkeeping: `monitor.train` around a train function that only
increments the step counter, against calling that function directly (many
calls, fastest of 9 rounds): the microseconds a step that records nothing
adds, free of the train step's noise.

Loop (`loop` table): one iteration = `driver.run()` (one CartPole-v0 step,
observers included, under `common.function`) + one train step on a [64, 2]
replay batch (the QNetwork (100, 50) of examples/dqn_cartpole.py),
`--iterations` iterations per repetition:

  plain      replay buffer observer only, `agent.train`: the baseline.
  tfmetrics  plain + tf-agents' own metrics as observers (AverageReturn,
             AverageEpisodeLength, NumberOfEpisodes, EnvironmentSteps): what a
             tf-agents user runs already (the peer).
  idle       RLHealthMonitor: its EpisodeObserver in the driver and
             `monitor.train`, no summary due: the episode tracking's cost.
  every100   a summary every 100 train steps (episode statistics, progress,
             value vs return, entropy, KL, alerts, TensorBoard).
  every1     a summary every step: (every1 - idle) per iteration is the cost
             of one summary step.

Run from the repository root (about three minutes on two CPU cores):

    TF_USE_LEGACY_KERAS=1 .venv/bin/python benchmarks/bench_rl.py --markdown
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import statistics
import tempfile

import numpy as np
import tensorflow as tf
from _timing import cpu_count, format_table, interleaved_times, summarize
from tf_agents.agents.dqn import dqn_agent
from tf_agents.drivers import dynamic_step_driver
from tf_agents.environments import suite_gym, tf_py_environment
from tf_agents.metrics import tf_metrics
from tf_agents.networks import q_network
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.utils import common

from keras_gradmon.rl.monitor import RLHealthMonitor

NEVER = 10**12
TRAIN = {"plain": None, "idle": NEVER, "every100": 100}
LOOP = {"plain": None, "tfmetrics": None, "idle": NEVER, "every100": 100, "every1": 1}
TARGETS = {"idle": 1.01}


def _agent(time_step_spec, action_spec, layers):
    tf.random.set_seed(0)
    agent = dqn_agent.DqnAgent(
        time_step_spec,
        action_spec,
        q_network=q_network.QNetwork(
            time_step_spec.observation, action_spec, fc_layer_params=layers
        ),
        optimizer=tf.keras.optimizers.Adam(1e-3),
        td_errors_loss_fn=common.element_wise_squared_loss,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
    )
    agent.initialize()
    return agent


def _train_fn(agent, every, log_dir, name):
    train = common.function(agent.train)
    if every is None:
        return train, None
    monitor = RLHealthMonitor(
        agent,
        every_n_steps=every,
        log_dir=os.path.join(log_dir, name),
        train_fn=train,
    )
    return monitor.train, monitor


def _dqn():
    observation = tensor_spec.TensorSpec([32], tf.float32)
    actions = tensor_spec.BoundedTensorSpec([], tf.int64, 0, 5)
    return _agent(ts.time_step_spec(observation), actions, (256, 256))


def make_train_step(name: str, log_dir: str):
    """`run(steps)`: bench_tfagents' DQN train step, plain or monitored."""
    agent = _dqn()
    train, _ = _train_fn(agent, TRAIN[name], log_dir, f"train_{name}")
    batch = _batch()
    return lambda steps: [train(batch) for _ in range(steps)]


def bookkeeping_us(calls: int = 20_000, rounds: int = 9) -> float:
    """Microseconds `monitor.train` adds to a call when nothing is due."""
    import time

    agent = _dqn()
    counter = agent.train_step_counter

    def bump(experience):
        return counter.assign_add(1)

    monitor = RLHealthMonitor(agent, every_n_steps=NEVER, train_fn=bump)
    batch = _batch()
    monitor.train(batch)  # step 0 is due: the first summary, then none
    best = {"direct": float("inf"), "monitored": float("inf")}
    for _ in range(rounds):
        for name, call in (("direct", bump), ("monitored", monitor.train)):
            start = time.perf_counter()
            for _ in range(calls):
                call(batch)
            best[name] = min(best[name], time.perf_counter() - start)
    return (best["monitored"] - best["direct"]) / calls * 1e6


def _batch():
    rng = np.random.default_rng(0)
    return trajectory.Trajectory(
        step_type=tf.zeros([64, 2], tf.int32),
        observation=tf.constant(rng.normal(size=(64, 2, 32)).astype("float32")),
        action=tf.constant(rng.integers(0, 6, (64, 2))),
        policy_info=(),
        next_step_type=tf.ones([64, 2], tf.int32),
        reward=tf.constant(rng.normal(size=(64, 2)).astype("float32")),
        discount=tf.ones([64, 2]),
    )


def make_loop(name: str, log_dir: str):
    """`run(iterations)`: collect one CartPole step, train once."""
    py_env = suite_gym.load("CartPole-v0")
    py_env.seed(0)
    env = tf_py_environment.TFPyEnvironment(py_env)
    agent = _agent(env.time_step_spec(), env.action_spec(), (100, 50))
    train, monitor = _train_fn(agent, LOOP[name], log_dir, f"loop_{name}")
    buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=1, max_length=10000
    )
    observers = [buffer.add_batch]
    if name == "tfmetrics":
        observers += [
            tf_metrics.AverageReturnMetric(),
            tf_metrics.AverageEpisodeLengthMetric(),
            tf_metrics.NumberOfEpisodes(),
            tf_metrics.EnvironmentSteps(),
        ]
    if monitor is not None:
        observers.append(monitor.observer)
    driver = dynamic_step_driver.DynamicStepDriver(
        env, agent.collect_policy, observers=observers, num_steps=1
    )
    driver.run = common.function(driver.run)
    for _ in range(100):
        driver.run()
    iterator = iter(buffer.as_dataset(sample_batch_size=64, num_steps=2).prefetch(3))

    def run(iterations: int) -> None:
        for _ in range(iterations):
            driver.run()
            train(next(iterator)[0])

    return run


def measure(part: str, makers: dict, count: int, reps: int) -> tuple[list, dict]:
    """Warms every variant up, then times them interleaved."""
    log_dir = tempfile.mkdtemp(prefix="bench_rl_")
    runs = {name: make(name, log_dir) for name, make in makers.items()}
    for run in runs.values():
        run(50)  # trace, compile, warm up (the first summary included)
    units = {name: (lambda run=run: run(count)) for name, run in runs.items()}
    times = interleaved_times(units, reps)
    rows = [{"model": part, **row} for row in summarize(times, "plain", TARGETS)]
    return rows, {name: [t / count * 1e3 for t in ts_] for name, ts_ in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    print(f"TensorFlow {tf.__version__}, {cpu_count()} CPUs, {args.reps} reps")
    train_rows, train_ms = measure(
        "train", {n: make_train_step for n in TRAIN}, args.steps, args.reps
    )
    loop_rows, loop_ms = measure(
        "loop", {n: make_loop for n in LOOP}, args.iterations, args.reps
    )
    rows = train_rows + loop_rows
    print(format_table(rows))
    for part, ms in (("train step", train_ms), ("loop iteration", loop_ms)):
        print(
            f"ms per {part} (min / median): "
            + ", ".join(
                f"{n} {min(v):.3f} / {statistics.median(v):.3f}" for n, v in ms.items()
            )
        )
    summary = min(loop_ms["every1"]) - min(loop_ms["idle"])
    print(f"one summary step costs {summary:.2f} ms (loop every1 - idle, fastest)")
    extra = bookkeeping_us()
    print(
        f"monitor.train adds {extra:.2f} us to a call with nothing due: "
        f"{extra / (min(train_ms['plain']) * 1e3):.2%} of a train step"
    )
    if args.markdown:
        print()
        print(format_table(rows, markdown=True))


if __name__ == "__main__":
    main()
