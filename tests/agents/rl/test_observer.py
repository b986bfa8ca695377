"""EpisodeObserver in a tf-agents driver under common.function, against the
episodes the environments' scripts imply (float64 NumPy references)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.drivers import dynamic_step_driver
from tf_agents.environments import batched_py_environment, tf_py_environment
from tf_agents.policies import random_tf_policy
from tf_agents.utils import common

from keras_gradmon.rl.observer import EpisodeObserver
from tests.agents.rl.envs import (
    ChainEnv,
    boundary_steps,
    completed_episodes,
    driver_steps,
)

GAMMA = 0.9
WINDOW = 5
THRESHOLD = 10.0


def _envs():
    return [
        ChainEnv([4, 7, 2], lambda e, t: (e + 1) * 0.5 + t, GAMMA),
        ChainEnv([3], lambda e, t: 2.0 - e, GAMMA),
        ChainEnv([1, 6], lambda e, t: 3.0 * (t % 2), GAMMA),
    ]


def _driver(envs, observer, steps_per_run):
    env = tf_py_environment.TFPyEnvironment(
        batched_py_environment.BatchedPyEnvironment(envs)
    )
    policy = random_tf_policy.RandomTFPolicy(env.time_step_spec(), env.action_spec())
    driver = dynamic_step_driver.DynamicStepDriver(
        env, policy, observers=[observer], num_steps=steps_per_run * len(envs)
    )
    driver.run = common.function(driver.run)
    return env, driver


def _expected(episodes):
    kept = episodes[-WINDOW:]
    returns = np.array([e[1] for e in kept])
    lengths = np.array([e[3] for e in kept], np.float64)
    return {
        "count": float(len(episodes)),
        "return_mean": returns.mean(),
        "return_std": returns.std(),
        "return_min": returns.min(),
        "return_max": returns.max(),
        "return_median": float(np.median(returns)),
        "discounted_return_mean": np.mean([e[2] for e in kept]),
        "length_mean": lengths.mean(),
        "length_max": lengths.max(),
        "solve_rate": float(np.mean(returns >= THRESHOLD)),
    }


def test_episode_statistics_over_batched_envs_and_iterations():
    envs = _envs()
    observer = EpisodeObserver(
        batch_size=3,
        window=WINDOW,
        discount=GAMMA,
        solve_threshold=THRESHOLD,
        observation_spec=tf.TensorSpec([3], tf.float32),
    )
    _, driver = _driver(_envs(), observer, steps_per_run=3)
    time_step, state = None, None
    # 3 counted steps per env per run: episodes cross runs
    for run, steps in enumerate(driver_steps(envs, runs=8, num_steps=9), start=1):
        time_step, state = driver.run(time_step, state)
        episodes = completed_episodes(envs, steps)
        got = {k: float(v) for k, v in observer.result().items()}
        boundaries = sum(
            len({s for s in boundary_steps(env, steps) if s < steps}) for env in envs
        )
        assert got.pop("env_steps") == 3 * steps - boundaries
        if not episodes:
            assert got["count"] == 0
            continue
        assert got == pytest.approx(_expected(episodes), rel=1e-12, abs=1e-12), run
    assert len(episodes) > WINDOW  # the ring buffer wrapped
    observations, discounted = observer.start_states()
    kept = episodes[-WINDOW:]
    np.testing.assert_array_equal(observations.numpy(), np.stack([e[4] for e in kept]))
    np.testing.assert_allclose(discounted.numpy(), [e[2] for e in kept], rtol=1e-12)


def _one_step_envs():
    return [ChainEnv([1], lambda e, t, j=j: float(j * 10 + e), 1.0) for j in range(4)]


def test_more_episodes_ending_at_once_than_the_window_holds():
    observer = EpisodeObserver(batch_size=4, window=3)
    _, driver = _driver(_one_step_envs(), observer, steps_per_run=1)
    driver.run()
    returns = [e[1] for e in completed_episodes(_one_step_envs(), 1)]
    assert returns == [0.0, 10.0, 20.0, 30.0]
    result = observer.result()
    assert float(result["count"]) == 4
    assert float(result["return_min"]) == 10.0  # the last 3 of the 4 are kept
    assert float(result["return_mean"]) == 20.0


def test_the_batch_size_is_checked_with_a_clear_error():
    observer = EpisodeObserver(batch_size=1)
    _, driver = _driver(_envs(), observer, steps_per_run=1)
    with pytest.raises(ValueError, match=r"batch_size=1 .* batch size 3"):
        driver.run()


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"window": -3}, "window"),
        ({"discount": 1.5}, "discount"),
        ({"solve_threshold": "195"}, "solve_threshold"),
    ],
)
def test_bad_arguments_name_the_argument_and_value(kwargs, name):
    ((key, value),) = kwargs.items()
    with pytest.raises(ValueError, match=rf"`{name}` .* Received: {key}={value!r}"):
        EpisodeObserver(**kwargs)
