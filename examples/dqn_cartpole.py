"""DQN on CartPole with tf-agents, monitored by keras_gradmon.

The agent's optimizer is wrapped: every train step records gradient
statistics (and clips, as configured) inside the compiled step, and under the
default `tf.summary` writer the step writes them itself, next to tf-agents'
own summaries. An `AlertChecker` looks at each new summary on the host, and
an `ActivationMonitor` measures the QNetwork's hidden layers (activation
statistics, histograms, dead ReLU units) on a fixed batch of observations.

Run:

    TF_USE_LEGACY_KERAS=1 python examples/dqn_cartpole.py --iterations 2000
    tensorboard --logdir /tmp/keras_gradmon_dqn
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow

import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.drivers import dynamic_step_driver
from tf_agents.environments import suite_gym, tf_py_environment
from tf_agents.networks import q_network
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.utils import common

import keras_gradmon

MONITOR = {
    "every_n_steps": 50,
    "histogram_every_n_steps": 500,
    "groups": {"encoder": "EncodingNetwork", "head": "QNetwork/dense"},
    "clipping": {"method": "global_norm", "max_norm": 10.0},
}


def average_return(
    environment: tf_py_environment.TFPyEnvironment, policy, episodes: int
) -> float:
    """The mean undiscounted return of `policy` over `episodes` episodes."""
    total = 0.0
    for _ in range(episodes):
        time_step = environment.reset()
        while not time_step.is_last():
            time_step = environment.step(policy.action(time_step).action)
            total += float(time_step.reward.numpy().sum())
    return total / episodes


def main(iterations: int, log_dir: str) -> None:
    train_env = tf_py_environment.TFPyEnvironment(suite_gym.load("CartPole-v0"))
    eval_env = tf_py_environment.TFPyEnvironment(suite_gym.load("CartPole-v0"))
    counter = tf.Variable(0, dtype=tf.int64)
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        tf.keras.optimizers.Adam(1e-3), config=MONITOR, step=counter
    )
    agent = dqn_agent.DqnAgent(
        train_env.time_step_spec(),
        train_env.action_spec(),
        q_network=q_network.QNetwork(
            train_env.observation_spec(),
            train_env.action_spec(),
            fc_layer_params=(100, 50),
        ),
        optimizer=optimizer,
        td_errors_loss_fn=common.element_wise_squared_loss,
        train_step_counter=counter,
    )
    agent.initialize()
    buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=train_env.batch_size, max_length=10000
    )
    driver = dynamic_step_driver.DynamicStepDriver(
        train_env, agent.collect_policy, observers=[buffer.add_batch], num_steps=1
    )
    driver.run = common.function(driver.run)
    agent.train = common.function(agent.train)
    dataset = buffer.as_dataset(sample_batch_size=64, num_steps=2).prefetch(3)
    checker = keras_gradmon.AlertChecker(optimizer)
    writer = tf.summary.create_file_writer(log_dir)

    for _ in range(100):  # seed the replay buffer
        driver.run()
    # A fixed probe batch: observations the random-ish collect policy saw.
    probe = buffer.gather_all().observation[0, :256]
    activations = keras_gradmon.ActivationMonitor(
        agent._q_network, probe, every_n_steps=MONITOR["every_n_steps"], writer=writer
    )
    iterator = iter(dataset)
    with writer.as_default():
        for i in range(1, iterations + 1):
            activations.update(counter)
            driver.run()
            experience, _ = next(iterator)
            loss = agent.train(experience).loss
            checker.check()
            if i % 500 == 0:
                grad_norm = optimizer.snapshot().totals["grad_norm"]
                dead = max(activations.latest.stat("dead_fraction").values())
                ret = average_return(eval_env, agent.policy, 5)
                tf.summary.scalar("eval/average_return", ret, step=counter)
                print(
                    f"step {i}: loss {float(loss):.3f}, grad_norm {grad_norm:.3f}, "
                    f"dead units {dead:.0%}, average return {ret:.1f}"
                )
    writer.flush()
    print(f"average return: {average_return(eval_env, agent.policy, 10):.1f}")
    print(f"TensorBoard logs: {log_dir}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--log-dir", default="/tmp/keras_gradmon_dqn")
    args = parser.parse_args()
    main(args.iterations, args.log_dir)
