"""The `rl/` tags: what the RL health monitor writes, and how to read it back.

Every tag is `rl/<group>/<name>`, or `rl/<scope>/<group>/<name>` with a
`tag_scope`; `<group>` is one of `episode`, `eval`, `progress`, `value`,
`policy`.
Writing (`rl_tag`) and reading (`parse_rl_tag`, used by the report) live
here together. Pure Python.

Example:

>>> rl_tag("episode/return_mean")
'rl/episode/return_mean'
>>> rl_tag("episode/return_mean", scope="cartpole")
'rl/cartpole/episode/return_mean'
>>> parse_rl_tag("rl/cartpole/episode/return_mean")
('cartpole', 'episode/return_mean')
"""

from __future__ import annotations

import re

#: The tag statistic of every RL tag, and the alert scope of RL alerts.
RL = "rl"
GROUPS = ("episode", "eval", "progress", "value", "policy")

#: Each RL tag's name (`<group>/<name>`) and what it holds.
NAMES: dict[str, str] = {
    "episode/count": "episodes completed so far",
    "episode/return_mean": "mean return of the last N episodes",
    "episode/return_std": "standard deviation (ddof 0) of those returns",
    "episode/return_min": "lowest of those returns",
    "episode/return_max": "highest of those returns",
    "episode/return_median": "median of those returns",
    "episode/length_mean": "mean length of the last N episodes",
    "episode/length_max": "longest of those episodes",
    "episode/solve_rate": "fraction of the last N episodes with return >= threshold",
    "eval/return_mean": "mean return of the evaluation episodes recorded",
    "eval/return_min": "lowest of those returns",
    "eval/return_max": "highest of those returns",
    "eval/episodes": "how many evaluation episodes",
    "progress/env_steps": "environment steps so far (boundary steps excluded)",
    "progress/train_steps": "the agent's train step counter",
    "progress/wall_time": "seconds since the monitor was created",
    "progress/env_steps_per_sec": "environment steps per second since last summary",
    "progress/updates_per_sec": "train steps per second since the last summary",
    "progress/training_intensity": "batch size x train steps / environment steps",
    "value/batch_mean": "mean value estimate on the train batch",
    "value/batch_max": "largest value estimate on the train batch",
    "value/start_estimate": "mean value estimate at the last N episodes' start states",
    "value/start_return": "mean discounted return those episodes realized",
    "value/overestimation": "start_estimate / start_return",
    "policy/entropy": "mean entropy of the collect policy on the train batch (nats)",
    "policy/entropy_fraction": "entropy / its maximum, ln(number of actions)",
    "policy/epsilon": "the epsilon of an epsilon-greedy collect policy",
    "policy/kl": "mean KL(before || after) of the policy over the train update",
    "policy/approx_kl": "mean((r - 1) - log r), r = after / before probability",
    "policy/clip_fraction": "PPO: fraction of importance ratios clipped",
    "policy/explained_variance": "PPO: 1 - Var(return - value) / Var(return)",
}

_PARSE = re.compile(
    rf"^{RL}/(?:(?P<scope>.+)/)?(?P<name>(?:{'|'.join(GROUPS)})/[^/]+)$"
)


def rl_tag(name: str, scope: str | None = None) -> str:
    """The tag of RL signal `name` (`<group>/<name>`), under `scope`: the
    library's tag scheme, `keras_gradmon.columns.tag("rl", name, scope)`
    (imported here, so that the report, which only parses, stays light)."""
    from keras_gradmon.columns import tag

    return tag(RL, name, scope)


def alert_scope(scope: str | None = None) -> str:
    """The tag scope of the RL alerts: `rl` or `rl/<scope>`."""
    return f"{RL}/{scope}" if scope else RL


def parse_rl_tag(name: str) -> tuple[str | None, str] | None:
    """`(scope, "<group>/<name>")` of an RL tag, or None for another tag."""
    match = _PARSE.match(name)
    if match is None:
        return None
    return match.group("scope"), match.group("name")


def is_rl_alert_scope(scope: str | None) -> bool:
    """Whether an alert's scope (from its `alert_log/...` tag) is an RL one."""
    return scope is not None and (scope == RL or scope.startswith(f"{RL}/"))
