"""`RLHealthMonitor` and its `RLOptions`: is the agent getting better,
exploring, calibrated, and using every sample enough? Written at summary
steps, with the host-side progress and throughput.

`RLOptions`: everything `RLHealthMonitor` is configured with, validated
without the agent. Pure Python (no TensorFlow).

Construction helpers of `RLHealthMonitor`: argument checks and the probe
for the agent's kind.

Progress and throughput, measured on the host between summaries.

Pure Python. Training intensity (replay ratio) follows the seed document:
`batch size x train steps / environment steps`, how many times each
collected transition has been trained on, on average.

`RLHealthMonitor`: is the agent getting better, exploring, calibrated,
and using every sample enough? Written to TensorBoard at summary steps.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from keras_gradmon import defaults, validation
from keras_gradmon.alerts.delivery import (
    AlertDelivery,
    AlertOptions,
    AlertRunner,
)
from keras_gradmon.alerts.events import Alert
from keras_gradmon.hub import RL, Hub, Publication
from keras_gradmon.recorders.tensorboard import recording_hub
from keras_gradmon.rl import rules as R
from keras_gradmon.rl.rules import (
    alert_metrics,
    check_window,
    default_rl_rules,
    derived,
    episode_numbers,
    evaluation_numbers,
    loss_numbers,
)
from keras_gradmon.rl.tags import alert_scope, rl_tag
from keras_gradmon.schedule import Frequency, Schedule

if TYPE_CHECKING:
    from keras_gradmon.rl.probes import ValueFn


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
class RLOptions(AlertOptions):
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

    SECTION: ClassVar[str] = "rl"

    env_batch_size: int = 1
    every_n_steps: Frequency = defaults.RL_EVERY_N_STEPS
    log_dir: str | None = None
    writer: Any = None
    window: int = defaults.RL_WINDOW
    solve_threshold: float | None = None
    value_fn: Callable[[Any], Any] | None = None
    kl: bool = True
    tag_scope: str | None = None
    train_batch_size: int | None = None
    train_fn: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        validation.positive_int("env_batch_size", self.env_batch_size)
        self.schedule()
        validation.positive_int("window", self.window)
        if not isinstance(self.kl, bool):
            raise ValueError(f"`kl` must be True or False. Received: kl={self.kl!r}")
        optional("tag_scope", self.tag_scope, validation.non_empty_string)
        optional("train_batch_size", self.train_batch_size, validation.positive_int)
        optional("train_fn", self.train_fn, callable_or_none)
        optional("value_fn", self.value_fn, callable_or_none)
        super().__post_init__()
        check_window(self.window, self.engine().rules.values())

    def schedule(self) -> Schedule:
        """When to write a summary (validates `every_n_steps`)."""
        return Schedule(self.every_n_steps, name="every_n_steps")

    def default_rules(self) -> Any:
        """The rules of `rules=None`: `default_rl_rules()`."""
        return default_rl_rules()


def check_agent(agent: Any) -> None:
    from tf_agents.agents import tf_agent

    if not isinstance(agent, tf_agent.TFAgent):
        raise ValueError(
            "`agent` must be a tf-agents agent (a `tf_agents.agents.TFAgent`). "
            f"Received: agent={agent!r}"
        )


def make_probe(agent: Any, value_fn: ValueFn | None, observer: Any, kl: bool) -> Any:
    from tf_agents.agents.ppo import ppo_agent

    from keras_gradmon.rl.probes import PolicyProbe, PPOProbe

    kind = PPOProbe if isinstance(agent, ppo_agent.PPOAgent) else PolicyProbe
    return kind(agent, value_fn, observer, kl)


def finite_numbers(name: str, value: Any) -> list[float]:
    try:
        numbers = [float(v) for v in value] if not isinstance(value, str) else []
    except (TypeError, ValueError):
        numbers = []
    if not numbers or not all(math.isfinite(v) for v in numbers):
        raise ValueError(
            f"`{name}` must be a non-empty sequence of finite numbers. "
            f"Received: {name}={value!r}"
        )
    return numbers


@dataclasses.dataclass
class Progress:
    """Counts and rates at successive summaries.

    Attributes:
        start: `time.perf_counter()` when measuring began.
        last: `(time, env_steps, train_steps)` at the previous summary.

    Example:

    >>> progress = Progress(start=0.0)
    >>> progress.numbers(10.0, env_steps=1000, train_steps=500, batch_size=64)
    {'progress/env_steps': 1000.0, 'progress/train_steps': 500.0, \
'progress/wall_time': 10.0, 'progress/training_intensity': 32.0}
    >>> progress.numbers(12.0, env_steps=1400, train_steps=900, batch_size=64)[
    ...     "progress/env_steps_per_sec"]
    200.0
    """

    start: float
    last: tuple[float, int, int] | None = None

    def numbers(
        self, now: float, env_steps: int, train_steps: int, batch_size: int | None
    ) -> dict[str, float]:
        """The progress numbers at a summary taken at time `now`."""
        numbers = {
            "progress/env_steps": float(env_steps),
            "progress/train_steps": float(train_steps),
            "progress/wall_time": now - self.start,
        }
        if self.last is not None and now > self.last[0]:
            elapsed = now - self.last[0]
            numbers["progress/env_steps_per_sec"] = (env_steps - self.last[1]) / elapsed
            numbers["progress/updates_per_sec"] = (train_steps - self.last[2]) / elapsed
        if batch_size is not None and env_steps > 0:
            intensity = batch_size * train_steps / env_steps
            numbers["progress/training_intensity"] = intensity
        self.last = (now, env_steps, train_steps)
        return numbers


def transitions_per_batch(step_type_shape: list[int]) -> int:
    """Transitions in a train batch of this outer shape: `B x (T - 1)` for
    `[B, T]` trajectories (a `[64, 2]` DQN batch is 64 transitions), `B` for
    `[B]`.

    Example:

    >>> transitions_per_batch([64, 2]), transitions_per_batch([32])
    (64, 32)
    """
    if len(step_type_shape) >= 2 and step_type_shape[1] > 1:
        return step_type_shape[0] * (step_type_shape[1] - 1)
    return step_type_shape[0]


class RLHealthMonitor:
    """Training health of a tf-agents agent, at summary steps, in TensorBoard.

    Add `monitor.observer` to the collect driver and train with
    `monitor.train(experience)` instead of `agent.train(experience)`. At
    steps where `every_n_steps` is due, it writes the `rl/` tags (see
    docs/tags.md): episode statistics over the last `window` episodes,
    progress, throughput and training intensity, the value estimate against
    the realized return, the collect policy's entropy, the KL divergence of
    the update (and for PPO the clip fraction and explained variance), then
    runs the RL alert rules. Other steps call `agent.train` and one Python
    comparison: the agent's step counter is read at the first call and at
    summary steps only, and counted on the host in between.

    The numbers are published to a `keras_gradmon.hub.Hub` (source "rl"):
    its own, writing to `log_dir` / `writer`, or `hub`, shared with the
    gradient and activation monitors. The options come as an `RLOptions`
    or, one by one, as keyword arguments (its fields, listed below).

    Args:
        agent: A tf-agents agent.
        config: An `RLOptions`, a dict of its fields, or a config file's
            path (its `rl` section).
        alerts: An `AlertOptions` (or a dict of its fields), False for no
            RL alerts; the alert options below one by one are the same.
        hub: Publish to this hub instead of one of the monitor's own (then
            without `log_dir` / `writer`).
        **options: Options, replacing those of `config`:

        env_batch_size: The collect environment's `batch_size`.
        every_n_steps: Summary frequency in train steps (int or callable).
        log_dir: Where to write; or `writer`, a `tf.summary` writer (the
            agent's own, say). Neither: numbers in `latest`, no TensorBoard.
        window: Episodes the episode statistics cover; at least 10 while a
            rule reads the collect return (judged once 10 are kept).
        solve_threshold: Return counting as solved (`episode/solve_rate`).
        value_fn: `value_fn(time_step) -> [N]` value estimates; None picks
            the agent's own (see `keras_gradmon.rl.probes`).
        kl: Measure the KL divergence over the update at summary steps.
        rules: RL alert rules (a mapping or a list); None for
            `default_rl_rules()`, `[]` for none.
        actions: `{tier: action}`: "log", "stop", "raise" or a callable.
        cooldown_steps: Same rule and subject not reported again within.
        max_per_rule: At most this many alerts per rule and tier.
        fold_steps: The log lines group alerts into incidents (rule,
            subject, tier): the first in full, repeats folded into one line
            after `fold_steps` steps (then 2x, 4x, ... as many), one line
            when the incident ends (quiet for `fold_steps` steps). None logs
            every alert in full. History, flags and JSON keep every alert.
        jsonl_path: Append each alert as a JSON line to this file.
        tag_scope: Tags become `rl/<scope>/...` (several agents in a run).
        train_batch_size: Transitions per update for the training intensity;
            None: counted in the experience (`B x (T - 1)`).
        train_fn: Called by `train`; default `agent.train` (looked up at
            each call).

    Example:

    ```python
    monitor = keras_gradmon.rl.RLHealthMonitor(
        agent, env_batch_size=env.batch_size, every_n_steps=500,
        writer=writer, solve_threshold=195)
    driver = DynamicStepDriver(env, agent.collect_policy,
                               observers=[buffer.add_batch, monitor.observer])
    for experience, _ in dataset:
        driver.run()
        monitor.train(experience)
        if monitor.stop_requested:
            break
    ```
    """

    def __init__(
        self,
        agent: Any,
        config: RLOptions | Mapping[str, Any] | str | None = None,
        *,
        alerts: AlertOptions | Mapping[str, Any] | bool | None = None,
        hub: Hub | None = None,
        **options: Any,
    ) -> None:
        check_agent(agent)
        if "options" in options:
            warnings.warn(
                "RLHealthMonitor(options=...) is deprecated and will be removed "
                "in the next release; pass RLHealthMonitor(agent, config=...).",
                DeprecationWarning,
                stacklevel=2,
            )
            config = options.pop("options")
        options = RLOptions.build(config, alerts, "RLHealthMonitor", **options)
        self.options = options
        self.agent = agent
        self.schedule = options.schedule()
        self.tag_scope = options.tag_scope
        self.train_batch_size = options.train_batch_size
        #: What `train` calls; None: `agent.train`, looked up at each call (so
        #: `agent.train = common.function(agent.train)` later still counts).
        self.train_fn = options.train_fn
        self._measurement(options)
        self.engine = options.engine()
        self._outputs(options, hub)
        self.progress = Progress(start=time.perf_counter())
        #: The numbers of the last summary, by RL tag name ("episode/...").
        self.latest: dict[str, float] = {}
        self._step: int | None = None
        self._per_call: int | None = None

    def _measurement(self, options: RLOptions) -> None:
        """The episode observer, the value estimate and the probe."""
        from keras_gradmon.rl.observer import EpisodeObserver
        from keras_gradmon.rl.probes import discount_of, value_function

        agent = self.agent
        self.value_fn = options.value_fn or value_function(agent)
        self.observer = EpisodeObserver(
            batch_size=options.env_batch_size,
            window=options.window,
            discount=discount_of(agent) or 1.0,
            solve_threshold=options.solve_threshold,
            observation_spec=(
                agent.time_step_spec.observation if self.value_fn else None
            ),
        )
        self.probe = make_probe(agent, self.value_fn, self.observer, options.kl)

    def _outputs(self, options: RLOptions, hub: Hub | None) -> None:
        """The hub (with a TensorBoard recorder of its own, unless shared),
        the alert delivery and the alert runner listening to the hub."""
        self._owns_hub = hub is None
        self.hub = recording_hub(options.log_dir, options.writer, hub)
        self.delivery = AlertDelivery(
            options.actions,
            jsonl_path=options.jsonl_path,
            tag_scope=alert_scope(self.tag_scope),
            hub=self.hub,
            fold_steps=options.fold_steps,
        )
        self.hub.subscribe(AlertRunner(self.engine, self.delivery), origin=self)

    @property
    def stop_requested(self) -> bool:
        """Whether an alert with the "stop" action has fired."""
        return self.delivery.stop_requested

    @property
    def history(self) -> list[Alert]:
        """Every RL alert emitted so far, in order."""
        return self.engine.history

    def _read_step(self) -> int:
        return int(self.agent.train_step_counter.numpy())

    def train(self, experience: Any, weights: Any = None) -> Any:
        """`agent.train(experience)`, measured when a summary step is due.

        Returns:
            What the agent's train returned (its `LossInfo`).
        """
        if self._step is None:
            self._step = self._read_step()
        first = self._step
        if self.schedule.any_due(first, first + (self._per_call or 1)):
            first = self._read_step()
            if self.schedule.any_due(first, first + (self._per_call or 1)):
                return self._measured(first, experience, weights)
        loss_info = self._call_train(experience, weights)
        if self._per_call is None:
            self._per_call = self._read_step() - first
        self._step = first + self._per_call
        return loss_info

    def _call_train(self, experience: Any, weights: Any) -> Any:
        train = self.train_fn or self.agent.train
        if weights is None:
            return train(experience)
        return train(experience, weights=weights)

    def _measured(self, step: int, experience: Any, weights: Any) -> Any:
        numbers, state = self.probe.before(experience)
        loss_info = self._call_train(experience, weights)
        if self.probe.kl:
            numbers.update(self.probe.after(experience, state))
        end = self._read_step()
        self._per_call, self._step = end - step, end
        numbers.update(loss_numbers(loss_info))
        shape = experience.step_type.shape.as_list()
        batch = self.train_batch_size or transitions_per_batch(shape)
        measured = {name: float(value) for name, value in numbers.items()}
        self.record(step, measured, train_batch_size=batch)
        return loss_info

    def record(
        self,
        step: int,
        numbers: Mapping[str, float] | None = None,
        train_batch_size: int | None = None,
    ) -> dict[str, float]:
        """Writes the episode and progress numbers (and `numbers`, RL tag
        name -> value) at `step`, then runs the alert rules. `train` calls
        it at summary steps; call it yourself to record between them.

        Returns:
            Everything recorded, by RL tag name (also in `latest`).
        """
        step = int(step)
        episodes = {k: float(v) for k, v in self.observer.result().items()}
        recorded = episode_numbers(episodes)
        recorded.update(
            self.progress.numbers(
                time.perf_counter(),
                int(episodes["env_steps"]),
                step,
                train_batch_size or self.train_batch_size,
            )
        )
        recorded.update(derived(dict(numbers or {}), episodes, self.probe))
        self.latest = recorded
        self._publish(step, recorded, alert_metrics(recorded, self.options.window))
        return recorded

    def record_evaluation(
        self, returns: Sequence[float], step: int | None = None
    ) -> dict[str, float]:
        """Records evaluation episodes' returns (`eval/...` at `step`, by
        default the agent's step now) and runs the return-collapse rule on
        their mean (subject "evaluation"). Returns what it recorded."""
        recorded = evaluation_numbers(finite_numbers("returns", returns))
        step = self._read_step() if step is None else int(step)
        self.latest.update(recorded)
        metrics = {R.RETURN: {"evaluation": recorded["eval/return_mean"]}}
        self._publish(step, recorded, metrics)
        return recorded

    def _publish(
        self, step: int, recorded: Mapping[str, float], metrics: Mapping
    ) -> None:
        """Publishes `recorded` under the RL tags, and the alert `metrics`
        (for the alert runner, which publishes its flags to the same hub)."""
        tags = {rl_tag(name, self.tag_scope): v for name, v in recorded.items()}
        publication = Publication(step, RL, tags, metrics=metrics, origin=self)
        self.hub.publish(publication)

    def flush(self) -> None:
        """Flushes the hub's recorders."""
        self.hub.flush()

    def close(self) -> None:
        """Flushes, and closes the event file if this monitor opened it (a
        given writer is flushed; a shared hub is closed by its owner)."""
        self.delivery.incidents.finish()
        if self._owns_hub:
            self.hub.close()
        else:
            self.hub.flush()
