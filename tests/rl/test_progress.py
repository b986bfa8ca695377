"""Counts, rates and training intensity, exactly; what a summary holds."""

from __future__ import annotations

import pytest

from keras_gradmon.rl.monitor import Progress, transitions_per_batch
from keras_gradmon.rl.rules import MIN_EPISODES, alert_metrics, derived, episode_numbers


def test_progress_numbers_are_exact():
    progress = Progress(start=100.0)
    first = progress.numbers(102.0, env_steps=1000, train_steps=900, batch_size=64)
    assert first == {
        "progress/env_steps": 1000.0,
        "progress/train_steps": 900.0,
        "progress/wall_time": 2.0,
        "progress/training_intensity": 64 * 900 / 1000,
    }
    second = progress.numbers(106.0, env_steps=1400, train_steps=1300, batch_size=64)
    assert second["progress/env_steps_per_sec"] == 400 / 4.0
    assert second["progress/updates_per_sec"] == 400 / 4.0
    assert second["progress/training_intensity"] == 64 * 1300 / 1400
    # measured once an environment step is collected
    assert "progress/training_intensity" not in Progress(0.0).numbers(1.0, 0, 0, 64)
    assert Progress(0.0).numbers(1.0, 1, 0, 64)["progress/training_intensity"] == 0


def test_transitions_per_batch():
    assert transitions_per_batch([64, 2]) == 64
    assert transitions_per_batch([8, 129]) == 8 * 128
    assert transitions_per_batch([32]) == 32
    assert transitions_per_batch([32, 1]) == 32


class _Probe:
    max_entropy = 0.6931471805599453  # ln 2


def test_derived_numbers():
    episodes = {"count": 3.0}
    numbers = derived(
        {
            "policy/entropy": 0.34657359027997264,
            "value/start_estimate": 30.0,
            "value/start_return": 12.0,
        },
        episodes,
        _Probe(),
    )
    assert numbers["policy/entropy_fraction"] == pytest.approx(0.5, rel=1e-15)
    assert numbers["value/overestimation"] == 2.5
    negative = derived(
        {"value/start_estimate": 3.0, "value/start_return": -2.0}, episodes, _Probe()
    )
    assert "value/overestimation" not in negative  # a ratio needs a positive return
    zero = derived(
        {"value/start_estimate": 3.0, "value/start_return": 0.0}, episodes, _Probe()
    )
    assert "value/overestimation" not in zero
    before = derived(
        {"value/start_estimate": 3.0, "value/start_return": 0.0}, {"count": 0.0},
        _Probe(),
    )
    assert before == {}  # no complete episode yet: no start states


def test_episode_numbers_and_alert_metrics():
    assert episode_numbers({"count": 0.0, "env_steps": 7.0}) == {"episode/count": 0.0}
    episodes = {"count": 12.0, "env_steps": 300.0, "return_mean": 25.0,
                "discounted_return_mean": 20.0}
    recorded = episode_numbers(episodes)
    assert recorded == {"episode/count": 12.0, "episode/return_mean": 25.0}
    recorded["progress/training_intensity"] = 0.5
    recorded["policy/entropy_fraction"] = float("nan")  # not fed to a rule
    assert alert_metrics(recorded, window=100) == {
        "training intensity": {"replay": 0.5},
        "return": {"episodes": 25.0},
    }


@pytest.mark.parametrize(
    ("count", "window", "judged"),
    [
        (MIN_EPISODES - 1, 100, False),  # one episode short
        (MIN_EPISODES, 100, True),  # exactly enough kept
        (1000, MIN_EPISODES, True),  # the window keeps exactly enough
        (1000, MIN_EPISODES - 1, False),  # completed many, kept too few
    ],
)
def test_the_collect_return_is_judged_once_min_episodes_are_kept(
    count, window, judged
):
    recorded = {"episode/count": float(count), "episode/return_mean": 25.0}
    expected = {"return": {"episodes": 25.0}} if judged else {}
    assert alert_metrics(recorded, window) == expected
