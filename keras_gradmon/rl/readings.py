"""What an RL summary holds: the numbers, derived ratios, alert metrics.

Pure Python over the floats `RLHealthMonitor` gathers at a summary step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from keras_gradmon.alerts.base import Rule
from keras_gradmon.rl import rules as R

#: The collect return is judged once this many episodes are kept: the mean
#: of fewer is too noisy to call a collapse.
MIN_EPISODES = 10
#: The subject of the collect return (evaluations are "evaluation").
COLLECT = "episodes"


def collect_return_judged(count: float, window: int) -> bool:
    """Whether the rules read the collect return: at least `MIN_EPISODES`
    episodes kept, the last `min(count, window)` of `count` completed.

    Example:

    >>> collect_return_judged(10, window=100), collect_return_judged(9, 100)
    (True, False)
    >>> collect_return_judged(1000, window=5)  # never more than 5 kept
    False
    """
    return min(count, window) >= MIN_EPISODES


def check_window(window: int, rules: Iterable[Rule]) -> None:
    """Refuses a `window` too small for a rule that reads the collect
    return: it would never be judged.

    Example:

    >>> check_window(5, R.default_rl_rules().values())
    Traceback (most recent call last):
    ...
    ValueError: `window` must be at least 10 while a rule reads the collect \
return (ReturnCollapseRule): it is judged once 10 episodes are kept, and a \
window of 5 never keeps them. Raise `window`, or judge the evaluations only \
(`ReturnCollapseRule(subjects="evaluation")`), or leave the rule out of \
`rules`. Received: window=5
    """
    readers = [
        type(rule).__name__
        for rule in rules
        if rule.metric == R.RETURN and rule.applies_to(COLLECT)
    ]
    if readers and window < MIN_EPISODES:
        raise ValueError(
            f"`window` must be at least {MIN_EPISODES} while a rule reads the "
            f"collect return ({readers[0]}): it is judged once {MIN_EPISODES} "
            f"episodes are kept, and a window of {window} never keeps them. "
            "Raise `window`, or judge the evaluations only "
            '(`ReturnCollapseRule(subjects="evaluation")`), or leave the rule '
            "out of `rules`. "
            f"Received: window={window!r}"
        )


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


def alert_metrics(
    recorded: dict[str, float], window: int
) -> dict[str, dict[str, float]]:
    """The numbers the RL rules read, `{metric: {subject: value}}`; the
    collect return once `collect_return_judged` (episodes over `window`).

    Example:

    >>> numbers = {"episode/count": 10.0, "episode/return_mean": 20.0}
    >>> alert_metrics(numbers, window=100), alert_metrics(numbers, window=9)
    ({'return': {'episodes': 20.0}}, {})
    """
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
    if collect_return_judged(recorded.get("episode/count", 0), window):
        metrics[R.RETURN] = {COLLECT: recorded["episode/return_mean"]}
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
