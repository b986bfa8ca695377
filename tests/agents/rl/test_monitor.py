"""RLHealthMonitor on a DQN agent whose Q-values are known in closed form:
value against return, exact counts and intensity, summaries at due steps
only, event files read back with TensorBoard's reader, alerts to the report."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.utils import common

from keras_gradmon.cli import EXIT_ALERTS, main
from keras_gradmon.rl.monitor import RLHealthMonitor
from keras_gradmon.rl.rules import OverestimationRule, default_rl_rules
from tests.agents.rl.envs import ChainEnv, completed_episodes
from tests.agents.rl.helpers import (
    BATCH,
    GAMMA,
    LENGTHS,
    chain_dqn,
    collect,
    true_value,
)
from tests.reference import alert_records, load_events, scalar_series

PREFILL = 30


def _run(
    tmp_path,
    scale,
    counter_dtype=tf.int64,
    calls=12,
    every=5,
    train=None,
    close=True,
    rules=None,
):
    agent, env, buffer = chain_dqn(scale, counter_dtype)
    monitor = RLHealthMonitor(
        agent, every_n_steps=every, log_dir=str(tmp_path), rules=rules
    )
    driver = collect(env, agent, [buffer.add_batch, monitor.observer])
    for _ in range(PREFILL):
        driver.run()
    iterator = iter(buffer.as_dataset(sample_batch_size=BATCH, num_steps=2))
    batches, before = {}, monitor.probe.before
    calls_made = []

    def spy(experience):
        calls_made.append(int(agent.train_step_counter.numpy()))
        return before(experience)

    monitor.probe.before = spy
    monitor.train_fn = common.function(train(agent) if train else agent.train)
    for call in range(calls):
        driver.run()
        experience, _ = next(iterator)
        batches[call] = experience
        monitor.train(experience)
    if close:
        monitor.close()
    return agent, monitor, batches, calls_made


def test_values_counts_and_intensity_are_exact(tmp_path):
    _, monitor, batches, summaries = _run(tmp_path, 1.0)
    assert summaries == [0, 5, 10]  # the probes ran at due steps only
    latest = monitor.latest
    env_steps = PREFILL + 11  # one counted step per driver run
    assert latest["progress/env_steps"] == env_steps
    assert latest["progress/train_steps"] == 10
    assert latest["progress/training_intensity"] == BATCH * 10 / env_steps
    episodes = completed_episodes([ChainEnv(LENGTHS, gamma=GAMMA)], _driver_steps(41))
    assert latest["episode/count"] == len(episodes)
    starts = np.array([e[4][0] for e in episodes])
    assert latest["value/start_return"] == pytest.approx(
        np.mean([e[2] for e in episodes]), rel=1e-6
    )
    assert latest["value/start_estimate"] == pytest.approx(
        np.mean(true_value(starts)), rel=1e-5
    )
    assert latest["value/overestimation"] == pytest.approx(1.0, abs=2e-5)
    observations = batches[10].observation.numpy().reshape(-1, 3)
    inside = batches[10].step_type.numpy().reshape(-1) != 2  # not LAST
    values = true_value(observations[inside, 0])
    assert latest["value/batch_mean"] == pytest.approx(values.mean(), rel=1e-5)
    assert latest["value/batch_max"] == pytest.approx(values.max(), rel=1e-5)
    assert latest["policy/epsilon"] == pytest.approx(0.1)
    events = load_events(str(tmp_path))
    assert scalar_series(events, "rl/progress/train_steps") == {0: 0, 5: 5, 10: 10}
    written = scalar_series(events, "rl/value/overestimation")
    assert written[10] == pytest.approx(latest["value/overestimation"], rel=1e-6)


def test_an_int32_counter_advancing_two_steps_per_call(tmp_path):
    # tf-agents' DqnAgent cannot train with an int32 counter (its loss
    # summaries need int64), so `train_fn` advances it as a 2-epoch PPO would.
    def two_epochs(agent):
        return lambda experience: agent.train_step_counter.assign_add(2)

    _, monitor, _, summaries = _run(tmp_path, 1.0, tf.int32, calls=7, train=two_epochs)
    # a call spanning a due step (multiples of 5) records, at its first step
    assert summaries == [0, 4, 10]
    events = load_events(str(tmp_path))
    assert scalar_series(events, "rl/progress/train_steps") == {0: 0, 4: 4, 10: 10}
    assert monitor.latest["progress/training_intensity"] == BATCH * 10 / (PREFILL + 6)


def _driver_steps(counted: int) -> int:
    """Env steps taken for `counted` non-boundary steps of the chain env."""
    taken, seen, boundaries = 0, 0, set()
    start, episode = 0, 0
    while start < 4 * counted:
        end = start + LENGTHS[episode % len(LENGTHS)] - 1
        boundaries.add(end + 1)
        start, episode = end + 2, episode + 1
    while seen < counted:
        seen += taken not in boundaries
        taken += 1
    return taken


def test_entropy_of_the_epsilon_greedy_collect_policy(tmp_path):
    _, monitor, _, _ = _run(tmp_path, 1.0, calls=1, every=1)
    # Q ties for both actions: greedy takes action 0; p = (0.95, 0.05)
    p = np.array([0.95, 0.05])
    entropy = -np.sum(p * np.log(p))
    assert monitor.latest["policy/entropy"] == pytest.approx(entropy, rel=1e-6)
    assert monitor.latest["policy/entropy_fraction"] == pytest.approx(
        entropy / np.log(2), rel=1e-6
    )
    assert monitor.latest["policy/kl"] == 0.0  # the frozen policy did not move


def test_overestimation_alert_reaches_the_report(tmp_path, capsys):
    # Three summaries 5 steps apart: the rule counting summaries alone (the
    # default also asks for 2,000 steps).
    rules = {
        **default_rl_rules(),
        "value_overestimation": OverestimationRule(ratio=2.0, patience=3),
    }
    _, monitor, _, _ = _run(tmp_path, 3.0, calls=11, every=5, close=False, rules=rules)
    monitor.record_evaluation([5.0], step=10)  # the same step: flags kept
    monitor.close()
    (alert,) = monitor.history
    assert alert.rule == "overestimation" and alert.step == 10
    assert alert.value == pytest.approx(3.0, rel=1e-5)
    events = load_events(str(tmp_path))
    assert scalar_series(events, "alerts/rl/value_overestimation") == {
        0: 0.0,
        5: 0.0,
        10: 1.0,
    }
    (logged,) = alert_records(events, "rl")
    assert logged["message"] == alert.message
    code = main(["report", str(tmp_path), "--no-plots", "--fail-on", "warning"])
    out = capsys.readouterr().out
    assert code == EXIT_ALERTS
    assert alert.message in out.split(f"== {tmp_path.name} [rl] ==")[1]


def test_evaluation_returns_feed_the_return_collapse_rule(tmp_path):
    agent = chain_dqn()[0]
    monitor = RLHealthMonitor(agent, every_n_steps=10, log_dir=str(tmp_path))
    assert monitor.record_evaluation([200.0, 180.0], step=100) == {
        "eval/return_mean": 190.0,
        "eval/return_min": 180.0,
        "eval/return_max": 200.0,
        "eval/episodes": 2.0,
    }
    assert monitor.history == []
    monitor.record_evaluation(np.array([60.0, 80.0]), step=200)
    (alert,) = monitor.history
    assert (alert.subject, alert.value, alert.threshold) == ("evaluation", 70.0, 95.0)
    monitor.close()
    events = load_events(str(tmp_path))
    assert scalar_series(events, "rl/eval/return_mean") == {100: 190.0, 200: 70.0}


@pytest.mark.parametrize(
    "options, name, shown",
    [
        ({"agent": "dqn"}, "agent", "'dqn'"),
        ({"env_batch_size": 0}, "env_batch_size", "0"),
        ({"every_n_steps": 0}, "every_n_steps", "0"),
        ({"window": 0}, "window", "0"),
        ({"window": 9}, "window", "9"),  # never keeps the 10 the return rule needs
        ({"fold_steps": 0}, "fold_steps", "0"),
        ({"kl": "yes"}, "kl", "'yes'"),
        ({"value_fn": 3}, "value_fn", "3"),
        ({"train_batch_size": -1}, "train_batch_size", "-1"),
        ({"tag_scope": ""}, "tag_scope", "''"),
        ({"writer": "logs"}, "writer", "'logs'"),
        ({"cooldown_steps": -1}, "cooldown_steps", "-1"),
        ({"solve_threshold": [1]}, "solve_threshold", r"\[1\]"),
    ],
)
def test_bad_arguments_name_the_argument(options, name, shown):
    agent = options.pop("agent", None) or chain_dqn()[0]
    with pytest.raises(ValueError, match=rf"`{name}`.*Received: .*{name}={shown}"):
        RLHealthMonitor(agent, **options)


def test_bad_evaluation_returns(tmp_path):
    monitor = RLHealthMonitor(chain_dqn()[0], log_dir=str(tmp_path))
    for returns in ([], [float("nan")], "12", None):
        with pytest.raises(ValueError, match=r"`returns` must be a non-empty"):
            monitor.record_evaluation(returns, step=1)
