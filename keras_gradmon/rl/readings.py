"""What an RL summary holds: the numbers, derived ratios, alert metrics.

Pure Python over the floats `RLHealthMonitor` gathers at a summary step.
"""

from __future__ import annotations

import math
from typing import Any

from keras_gradmon.rl import rules as R

#: The return rule reads the mean return once this many episodes are kept.
MIN_EPISODES = 10


def episode_numbers(episodes: dict[str, float]) -> dict[str, float]:
    """The `episode/*` numbers; only the count before the first episode."""
    if episodes["count"] == 0:
        return {"episode/count": 0.0}
    skip = ("env_steps", "discounted_return_mean")
    return {f"episode/{k}": v for k, v in episodes.items() if k not in skip}


def derived(
    numbers: dict[str, float], episodes: dict[str, float], probe: Any
) -> dict[str, float]:
    """Adds the entropy fraction and the value/return ratio; drops the
    start-state numbers while no episode is complete."""
    if episodes["count"] == 0:
        numbers.pop("value/start_estimate", None)
        numbers.pop("value/start_return", None)
    entropy = numbers.get("policy/entropy")
    if entropy is not None and probe.max_entropy:
        numbers["policy/entropy_fraction"] = entropy / probe.max_entropy
    estimate = numbers.get("value/start_estimate")
    realized = numbers.get("value/start_return")
    if estimate is not None and realized is not None and realized > 0:
        numbers["value/overestimation"] = estimate / realized
    return numbers


def alert_metrics(recorded: dict[str, float]) -> dict[str, dict[str, float]]:
    """The numbers the RL rules read, `{metric: {subject: value}}`."""
    sources = {
        R.ENTROPY: ("collect_policy", "policy/entropy_fraction"),
        R.VALUE_RATIO: ("start_states", "value/overestimation"),
        R.INTENSITY: ("replay", "progress/training_intensity"),
        R.THROUGHPUT: ("collection", "progress/env_steps_per_sec"),
    }
    metrics = {
        metric: {subject: recorded[name]}
        for metric, (subject, name) in sources.items()
        if name in recorded and math.isfinite(recorded[name])
    }
    if recorded.get("episode/count", 0) >= MIN_EPISODES:
        metrics[R.RETURN] = {"episodes": recorded["episode/return_mean"]}
    return metrics


def evaluation_numbers(returns: list[float]) -> dict[str, float]:
    """The `eval/*` numbers of evaluation episodes' returns.

    Example:

    >>> evaluation_numbers([200.0, 100.0])["eval/return_mean"]
    150.0
    """
    return {
        "eval/return_mean": math.fsum(returns) / len(returns),
        "eval/return_min": min(returns),
        "eval/return_max": max(returns),
        "eval/episodes": float(len(returns)),
    }


def loss_numbers(loss_info: Any) -> dict[str, Any]:
    """What the agent's `LossInfo` says: PPO's clip fraction (a tensor; a
    Python 0.0 when clipping is off)."""
    clip = getattr(getattr(loss_info, "extra", None), "clip_fraction", None)
    if clip is None or isinstance(clip, float):
        return {}
    return {"policy/clip_fraction": clip}
