"""`RLOptions`: everything `RLHealthMonitor` is configured with, validated
without the agent. Pure Python (no TensorFlow)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from keras_gradmon import _validation, defaults
from keras_gradmon.alerts import AlertEngine, RateLimiter
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.incidents import DEFAULT_FOLD_STEPS, IncidentLog
from keras_gradmon.alerts.runner import Action, validate_actions
from keras_gradmon.rl.readings import check_window
from keras_gradmon.rl.rules import default_rl_rules
from keras_gradmon.schedule import Frequency, Schedule


def optional(name: str, value: Any, check: Callable[[str, Any], Any]) -> Any:
    """`check(name, value)`, unless `value` is None."""
    return None if value is None else check(name, value)


def callable_or_none(name: str, value: Any) -> Any:
    """`value`, if callable (or None)."""
    if not callable(value):
        raise ValueError(
            f"`{name}` must be callable or None. Received: {name}={value!r}"
        )
    return value


@dataclasses.dataclass(frozen=True)
class RLOptions:
    """The options of `RLHealthMonitor` (see there for each).

    Example:

    >>> RLOptions(every_n_steps=500, solve_threshold=195.0).window
    100
    >>> RLOptions(env_batch_size=0)
    Traceback (most recent call last):
    ...
    ValueError: `env_batch_size` must be a positive integer. Received: \
env_batch_size=0
    >>> RLOptions(fold_steps=0)
    Traceback (most recent call last):
    ...
    ValueError: `fold_steps` must be a positive integer. Received: fold_steps=0
    """

    env_batch_size: int = 1
    every_n_steps: Frequency = defaults.RL_EVERY_N_STEPS
    log_dir: str | None = None
    writer: Any = None
    window: int = defaults.RL_WINDOW
    solve_threshold: float | None = None
    value_fn: Callable[[Any], Any] | None = None
    kl: bool = True
    rules: Mapping[str, Rule] | Sequence[Rule] | None = None
    actions: Mapping[str, Action] | None = None
    cooldown_steps: int = 0
    max_per_rule: int | None = None
    fold_steps: int | None = DEFAULT_FOLD_STEPS
    jsonl_path: str | None = None
    tag_scope: str | None = None
    train_batch_size: int | None = None
    train_fn: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        _validation.positive_int("env_batch_size", self.env_batch_size)
        self.schedule()
        _validation.positive_int("window", self.window)
        if not isinstance(self.kl, bool):
            raise ValueError(f"`kl` must be True or False. Received: kl={self.kl!r}")
        optional("tag_scope", self.tag_scope, _validation.non_empty_string)
        optional("train_batch_size", self.train_batch_size, _validation.positive_int)
        optional("train_fn", self.train_fn, callable_or_none)
        optional("value_fn", self.value_fn, callable_or_none)
        optional("jsonl_path", self.jsonl_path, _validation.string)
        validate_actions(self.actions)
        IncidentLog(self.fold_steps)  # validates `fold_steps`, as the checkers
        check_window(self.window, self.engine().rules.values())

    def schedule(self) -> Schedule:
        """When to write a summary (validates `every_n_steps`)."""
        return Schedule(self.every_n_steps, name="every_n_steps")

    def engine(self) -> AlertEngine:
        """A fresh alert engine: the rules (`default_rl_rules()` for None)
        and the limiter (validates `rules` and the limiter's options)."""
        rules = default_rl_rules() if self.rules is None else self.rules
        return AlertEngine(rules, self.limiter())

    def limiter(self) -> RateLimiter:
        """The alerts' rate limiter (validates its two options)."""
        return RateLimiter(
            cooldown_steps=self.cooldown_steps, max_per_rule=self.max_per_rule
        )
