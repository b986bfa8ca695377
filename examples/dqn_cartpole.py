"""DQN on CartPole with tf-agents, monitored by keras_gradmon.

Gradients: the agent's optimizer is wrapped: every train step records
gradient statistics (and clips, as configured) inside the compiled step, and
under the default `tf.summary` writer the step writes them itself, next to
tf-agents' own summaries. An `AlertChecker` looks at each new summary on
the host, and an `ActivationMonitor` measures the QNetwork's hidden layers
(activation statistics, histograms, dead ReLU units) on a fixed batch of
observations.

RL health: an `RLHealthMonitor` observes the collect driver (episode
returns and lengths, batched and in the driver's graph) and trains the agent
(`monitor.train`); at summary steps it writes the `rl/` tags: return mean,
median, min and max over the last episodes, solve rate, environment steps
per second, training intensity, the Q-value at the episodes' start states
against the discounted return they realized, the epsilon-greedy entropy
and the KL of each update, and it runs the RL alerts (return collapse,
entropy collapse, overestimation, low intensity, throughput drop).

Run three seeds and compare them:

    for seed in 0 1 2; do
      TF_USE_LEGACY_KERAS=1 python examples/dqn_cartpole.py --seed $seed \\
          --log-dir /tmp/keras_gradmon_dqn/dqn_seed$seed
    done
    keras-gradmon report /tmp/keras_gradmon_dqn --group '(dqn)_seed'
    tensorboard --logdir /tmp/keras_gradmon_dqn
"""

from __future__ import annotations

import argparse
import os
from typing import NamedTuple

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow

import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.drivers import dynamic_step_driver
from tf_agents.environments import suite_gym, tf_py_environment
from tf_agents.networks import q_network
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.utils import common

import keras_gradmon
from keras_gradmon.rl.monitor import RLHealthMonitor
from keras_gradmon.rl.rules import ReturnCollapseRule, default_rl_rules

MONITOR = {
    "every_n_steps": 50,
    "histogram_every_n_steps": 500,
    "groups": {"encoder": "EncodingNetwork", "head": "QNetwork/dense"},
    "clipping": {"method": "global_norm", "max_norm": 10.0},
}
#: CartPole-v0 counts as solved at an average return of 195.
SOLVED = 195.0
#: A random policy's average return on CartPole-v0: the return-collapse
#: rule judges the progress made beyond it (below it, a fall is noise).
RANDOM_RETURN = 22.0


def episode_returns(
    environment: tf_py_environment.TFPyEnvironment, policy, episodes: int
) -> list[float]:
    """The undiscounted return of each of `episodes` episodes of `policy`."""
    returns = []
    for _ in range(episodes):
        time_step, total = environment.reset(), 0.0
        while not time_step.is_last():
            time_step = environment.step(policy.action(time_step).action)
            total += float(time_step.reward.numpy().sum())
        returns.append(total)
    return returns


def make_agent(
    env: tf_py_environment.TFPyEnvironment,
    counter: tf.Variable,
    every_n_steps: int = MONITOR["every_n_steps"],
):
    """The DQN agent, its optimizer wrapped by the gradient monitor."""
    config = keras_gradmon.MonitorConfig.from_dict(
        {**MONITOR, "every_n_steps": every_n_steps}
    )
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        tf.keras.optimizers.Adam(1e-3), config=config, step=counter
    )
    agent = dqn_agent.DqnAgent(
        env.time_step_spec(),
        env.action_spec(),
        q_network=q_network.QNetwork(
            env.observation_spec(), env.action_spec(), fc_layer_params=(100, 50)
        ),
        optimizer=optimizer,
        td_errors_loss_fn=common.element_wise_squared_loss,
        # tf-agents' own DQN train_eval settings. The agent's defaults
        # (gamma 1, the target network copied every step) let the Q-values
        # run away: 10x the realized returns and 100x the gradient norm by
        # step 3,000, which the default alerts report.
        gamma=0.99,
        target_update_tau=0.05,
        target_update_period=5,
        train_step_counter=counter,
    )
    agent.initialize()
    return agent, optimizer


def make_environments(seed: int):
    """The training and evaluation CartPole-v0 environments, seeded."""
    train_py, eval_py = suite_gym.load("CartPole-v0"), suite_gym.load("CartPole-v0")
    train_py.seed(seed)
    eval_py.seed(seed + 1000)
    return (
        tf_py_environment.TFPyEnvironment(train_py),
        tf_py_environment.TFPyEnvironment(eval_py),
    )


def make_collection(env, agent, health: RLHealthMonitor):
    """The collect driver (the RL monitor observes it) and the replay data."""
    buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=env.batch_size, max_length=10000
    )
    driver = dynamic_step_driver.DynamicStepDriver(
        env,
        agent.collect_policy,
        observers=[buffer.add_batch, health.observer],
        num_steps=1,
    )
    driver.run = common.function(driver.run)
    for _ in range(100):  # seed the replay buffer
        driver.run()
    dataset = buffer.as_dataset(sample_batch_size=64, num_steps=2).prefetch(3)
    # A fixed probe batch: observations the random-ish collect policy saw.
    return driver, iter(dataset), buffer.gather_all().observation[0, :256]


def report_line(step: int, loss, health: RLHealthMonitor) -> str:
    nan, latest = float("nan"), health.latest
    return (
        f"step {step}: loss {float(loss.loss):.3f}, eval return "
        f"{latest['eval/return_mean']:.1f}, collect return "
        f"{latest.get('episode/return_mean', nan):.1f} (min "
        f"{latest.get('episode/return_min', nan):.0f}), value/return "
        f"{latest.get('value/overestimation', nan):.2f}"
    )


class Monitors(NamedTuple):
    """What watched a run: the RL health, the gradient alerts and the
    activations, each with the alerts it raised (`.history` / `.alerts`)."""

    health: RLHealthMonitor
    checker: keras_gradmon.AlertChecker
    activations: keras_gradmon.ActivationMonitor

    def alerts(self) -> list:
        """Every alert of the three monitors, in step order."""
        raised = [*self.checker.history, *self.activations.alerts]
        return sorted([*raised, *self.health.history], key=lambda a: a.step)


def make_health(agent, env, writer, summary_every: int) -> RLHealthMonitor:
    """The RL health monitor: a summary every `summary_every` train steps."""
    return RLHealthMonitor(
        agent,
        env_batch_size=env.batch_size,
        every_n_steps=summary_every,
        writer=writer,
        window=20,
        solve_threshold=SOLVED,
        rules={
            **default_rl_rules(),
            "return_collapse": ReturnCollapseRule(baseline=RANDOM_RETURN),
        },
        cooldown_steps=1000,
    )


def iteration(driver, iterator, counter: tf.Variable, monitors: Monitors):
    """One collect step and one train step, each monitor looking on; the
    train step's loss info."""
    monitors.activations.update(counter)
    driver.run()
    loss = monitors.health.train(next(iterator)[0])  # agent.train, measured
    monitors.checker.check()
    return loss


def train(
    iterations: int,
    log_dir: str,
    seed: int = 0,
    summary_every: int = 100,
    eval_every: int = 500,
    eval_episodes: int = 5,
    every_n_steps: int = MONITOR["every_n_steps"],
) -> Monitors:
    """Trains, monitored (gradient statistics and activations every
    `every_n_steps`, RL health every `summary_every`); returns the monitors,
    closed."""
    tf.random.set_seed(seed)
    train_env, eval_env = make_environments(seed)
    counter = tf.Variable(0, dtype=tf.int64)
    agent, optimizer = make_agent(train_env, counter, every_n_steps)
    agent.train = common.function(agent.train)
    writer = tf.summary.create_file_writer(log_dir)
    health = make_health(agent, train_env, writer, summary_every)
    driver, iterator, probe = make_collection(train_env, agent, health)
    monitors = Monitors(
        health,
        keras_gradmon.AlertChecker(optimizer),
        keras_gradmon.ActivationMonitor(
            agent._q_network, probe, every_n_steps=every_n_steps, writer=writer
        ),
    )
    with writer.as_default():
        for i in range(1, iterations + 1):
            loss = iteration(driver, iterator, counter, monitors)
            if i % eval_every == 0:
                # The greedy policy's returns: rl/eval/..., watched by the
                # return-collapse rule too.
                health.record_evaluation(
                    episode_returns(eval_env, agent.policy, eval_episodes)
                )
                print(report_line(i, loss, health))
    for monitor in monitors:
        monitor.close()
    print(f"TensorBoard logs: {log_dir}; then: keras-gradmon report {log_dir}")
    return monitors


def main(iterations: int, log_dir: str, **options) -> RLHealthMonitor:
    """Trains, monitored (the options of `train`); returns the RL monitor
    (its `latest` numbers)."""
    return train(iterations, log_dir, **options).health


class _HelpFormatter(
    argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter
):
    """Shows each argument's default, and the description as written."""


def parser() -> argparse.ArgumentParser:
    """The command line: this module's docstring as its description, and
    each argument's default in `--help`."""
    arguments = argparse.ArgumentParser(
        description=__doc__, formatter_class=_HelpFormatter
    )
    arguments.add_argument(
        "--iterations",
        type=int,
        default=3000,
        help="training iterations, each one collect step and one train step",
    )
    arguments.add_argument(
        "--log-dir",
        default="/tmp/keras_gradmon_dqn/dqn_seed0",
        help="where the TensorBoard logs go",
    )
    arguments.add_argument(
        "--seed", type=int, default=0, help="seed of TensorFlow and the environments"
    )
    return arguments


if __name__ == "__main__":
    args = parser().parse_args()
    main(args.iterations, args.log_dir, seed=args.seed)
