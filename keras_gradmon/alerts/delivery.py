"""How alerts reach people: `AlertRunner` feeds a monitor's publications to
its alert engine, `AlertDelivery` delivers what fires (log lines grouped
into incidents, `alerts/<rule>` flags and alert texts through a `Hub`,
JSON Lines, the tier's action), and `AlertChecker` runs the gradient rules
in a custom loop.

`AlertRunner`: feeds a monitor's publications to its alert engine and
delivers what fires (`AlertDelivery`): log lines grouped into incidents,
`alerts/<rule>` flags and alert texts through a `Hub`, JSON Lines, and the
action of the alert's tier.

`AlertChecker`: publishes the alert metrics of every summary a monitored
optimizer recorded to a hub, whose `AlertRunner` runs the rules and
delivers what fires (`runner.AlertDelivery`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.engine import AlertEngine, RateLimiter
from keras_gradmon.alerts.events import (
    CRITICAL,
    TIERS,
    WARNING,
    Alert,
)
from keras_gradmon.alerts.incidents import DEFAULT_FOLD_STEPS, IncidentLog
from keras_gradmon.alerts.log import AlertBatch
from keras_gradmon.columns import (
    NO_STEP,
    tag,
)
from keras_gradmon.hub import (
    ALERTS,
    GRADIENTS,
    Hub,
    Publication,
    chief_writes,
)
from keras_gradmon.recorders.tensorboard import check_log_dir, recording_hub
from keras_gradmon.validation import with_overrides

if TYPE_CHECKING:
    pass


#: What to do when an alert of a tier fires: "log" (only the log line),
#: "stop" (end `fit` after this batch, as `TerminateOnNaN` does; on JAX up
#: to two batches later, docs/architecture.md "Alerts"), "raise"
#: (`GradientAlertError`), or a callable taking the `Alert`.
Action = str | Callable[[Alert], Any]
ACTIONS = ("log", "stop", "raise")


class GradientAlertError(RuntimeError):
    """Raised by the "raise" action; carries the alert that fired.

    Attributes:
        alert: The `Alert`; also `step`, `rule` and `value` directly.
    """

    def __init__(self, alert: Alert) -> None:
        super().__init__(alert.message)
        self.alert = alert
        self.step = alert.step
        self.rule = alert.rule
        self.value = alert.value


def validate_actions(actions: Mapping[str, Action] | None) -> dict[str, Action]:
    resolved: dict[str, Action] = {WARNING: "log", CRITICAL: "log"}
    if actions is None:
        return resolved
    if not isinstance(actions, Mapping):
        raise ValueError(
            f"`actions` must be a mapping from tier {list(TIERS)} to an action. "
            f"Received: actions={actions!r}"
        )
    for tier, action in actions.items():
        if tier not in TIERS:
            raise ValueError(
                f"`actions` has unknown tier {tier!r}; tiers are {list(TIERS)}. "
                f"Received: actions={dict(actions)!r}"
            )
        if not (callable(action) or action in ACTIONS):
            raise ValueError(
                f"`actions[{tier!r}]` must be one of {list(ACTIONS)} or a callable. "
                f"Received: actions[{tier!r}]={action!r}"
            )
        resolved[tier] = action
    return resolved


class AlertDelivery:
    """Delivers what an `AlertEngine` raised: log lines grouped into
    incidents (`IncidentLog`, logger "keras_gradmon"), `alerts/<rule>`
    flags and the alerts (an `AlertBatch`: in TensorBoard a Markdown table
    under `alert_log/all` and the records under `keras_gradmon/alerts`, see
    `keras_gradmon.alerts.log`) published to a `Hub` (source "alerts", so
    every recorder of the hub gets them), JSON Lines, and each tier's
    action. Every alert is recorded and acted on;
    only the log lines fold repeats. Shared by the gradient, activation and
    RL alerts.

    Args:
        actions: `{tier: action}`; see `Action`.
        log_dir: Where to write `alerts/<rule>` (0 or 1 at each summary);
            or `writer`, an existing `tf.summary` writer; or `hub`. None of
            them: no flags.
        jsonl_path: Append each alert as one JSON line to this file.
        tag_scope: Inserted in the flags' tags (`alerts/<scope>/<rule>`).
        writes: Says whether this process writes TensorBoard summaries
            (False on the non-chief workers of a multi-worker strategy);
            None: always. Logging, JSON Lines and actions happen anyway.
        hub: The hub to publish the flags to (not closed by `close`).
        fold_steps: How the log lines fold repeats (see `IncidentLog`);
            None logs every alert in full.
        source: The kind of monitor the alerts come from ("gradients",
            "activations", ...; None: unnamed): names the tag of their
            Markdown table in TensorBoard (`AlertBatch.markdown_tag`).

    Example:

    >>> delivery = AlertDelivery({"critical": "stop"})
    >>> delivery.deliver(100, engine.update(100, metrics), engine)  # doctest: +SKIP
    """

    def __init__(
        self,
        actions: Mapping[str, Action] | None = None,
        log_dir: str | None = None,
        writer: Any = None,
        jsonl_path: str | None = None,
        tag_scope: str | None = None,
        writes: Callable[[], bool] | None = None,
        hub: Hub | None = None,
        fold_steps: int | None = DEFAULT_FOLD_STEPS,
        source: str | None = None,
    ) -> None:
        self.actions = validate_actions(actions)
        self.incidents = IncidentLog(fold_steps)
        self.writes = writes or (lambda: True)
        self._owns_hub = hub is None
        self.hub = recording_hub(log_dir, writer, hub)
        self.jsonl_path = jsonl_path
        self.tag_scope = tag_scope
        self.source = source
        self.stop_requested = False

    @property
    def acts(self) -> bool:
        """Whether an alert can change the run: a tier's action other than
        "log" ("stop", "raise", a callable)."""
        return any(action != "log" for action in self.actions.values())

    def close(self) -> None:
        """Logs the end of the open incidents; closes the hub's event files
        if the hub is this delivery's own (a later write reopens them);
        flushes a shared one."""
        self.incidents.finish()
        if self._owns_hub:
            self.hub.close()
        else:
            self.hub.flush()

    def deliver(self, step: int, alerts: list[Alert], engine: AlertEngine) -> None:
        """Logs, records and acts on the `alerts` `engine` raised at `step`.

        Raises:
            GradientAlertError: When an alert's tier has the "raise" action.
        """
        self.incidents.log(step, alerts)
        if self.jsonl_path and alerts:
            with open(self.jsonl_path, "a", encoding="utf-8") as file:
                for alert in alerts:
                    file.write(json.dumps(alert.to_dict()) + "\n")
        self._publish(step, alerts, engine)
        for alert in alerts:
            action = self.actions[alert.tier]
            if action == "stop":
                if not self.stop_requested:
                    self.incidents.log_stop(alert)  # nothing else says so
                self.stop_requested = True
            elif action == "raise":
                raise GradientAlertError(alert)
            elif callable(action):
                action(alert)

    def _publish(self, step: int, alerts: list[Alert], engine: AlertEngine) -> None:
        flags = {
            tag("alerts", name, self.tag_scope): float(name in engine.fired)
            for name in engine.rules
        }
        # The alerts themselves: a recorder writes them its way (TensorBoard:
        # a Markdown table and the records, `alerts.log`), or as JSON text.
        batch = AlertBatch(tuple(alerts), self.tag_scope, self.source)
        batches = (batch,) if alerts else ()
        # Written where this process writes summaries (the chief); the
        # hub's listeners get the flags anyway.
        record = bool(self.hub.recorders) and self.writes()
        self.hub.publish(
            Publication(step, ALERTS, flags, alerts=batches, origin=self, record=record)
        )
        if record:
            self.hub.flush()


class AlertRunner:
    """A hub listener: feeds the `metrics` of each publication to `engine`
    and delivers what fires. Publications without metrics are skipped. Two
    publications of one step (an RL summary, then an evaluation) share
    their flags: a rule that fired at the first stays flagged.

    Args:
        engine: The rules.
        delivery: Where the alerts go.

    Example:

    >>> runner = AlertRunner(engine, delivery)  # doctest: +SKIP
    >>> hub.subscribe(runner, origin=monitor)  # doctest: +SKIP
    """

    def __init__(self, engine: AlertEngine, delivery: AlertDelivery) -> None:
        self.engine = engine
        self.delivery = delivery
        self._fired: tuple[int | None, set[str]] = (None, set())

    def __call__(self, publication: Publication) -> list[Alert]:
        """Runs the rules on `publication.metrics`; returns their alerts.

        Raises:
            GradientAlertError: When an alert's tier has the "raise" action.
        """
        if not publication.metrics:
            return []
        step = publication.step
        alerts = self.engine.update(step, publication.metrics)
        if self._fired[0] == step:
            self.engine.fired |= self._fired[1]
        self._fired = (step, set(self.engine.fired))
        self.delivery.deliver(step, alerts, self.engine)
        return alerts


@dataclasses.dataclass(frozen=True, kw_only=True)
class AlertOptions:
    """How a monitor alerts: its rules, what each tier does, and how repeats
    are told. One object for every monitor: `GradientMonitorCallback`,
    `ActivationMonitorCallback`, `RLHealthMonitor` and `AlertChecker` take
    it as `alerts=`, and the activation and RL options hold these fields
    (`ActivationOptions` and `RLOptions` are `AlertOptions`). Validated at
    construction.

    Args:
        rules: Rules by name (or a list); None for the monitor's defaults
            (`keras_gradmon.alerts.default_rules()` for gradients).
        actions: `{tier: action}` for "warning" and "critical"; each "log"
            (default), "stop" (end `fit` after the batch; on JAX up to two
            batches later), "raise" (`GradientAlertError`) or a callable
            taking the `Alert`.
        jsonl_path: Append each alert as one JSON line to this file.
        cooldown_steps: The same rule, tier and subject is not reported
            again within this many steps (a critical passes a warning's).
        max_per_rule: At most this many alerts per rule and tier.
        fold_steps: The log lines group alerts into incidents (rule,
            subject, tier): the first in full, repeats folded into one line
            after `fold_steps` steps (then 2x, 4x, ... as many), one line
            when the incident ends (quiet for `fold_steps` steps). None logs
            every alert in full. The alerts themselves are all kept.

    Example:

    >>> AlertOptions(actions={"critical": "stop"}).fold_steps
    100
    >>> AlertOptions(cooldown_steps=-1)
    Traceback (most recent call last):
    ...
    ValueError: `cooldown_steps` must be a non-negative integer. Received: \
cooldown_steps=-1
    """

    #: The section of a config file that holds these options.
    SECTION: ClassVar[str] = "alerts"

    rules: Mapping[str, Rule] | Sequence[Rule] | None = None
    actions: Mapping[str, Action] | None = None
    jsonl_path: str | None = None
    cooldown_steps: int = 0
    max_per_rule: int | None = None
    fold_steps: int | None = DEFAULT_FOLD_STEPS

    def __post_init__(self) -> None:
        validate_actions(self.actions)
        IncidentLog(self.fold_steps)  # validates `fold_steps`
        if self.jsonl_path is not None:
            check_log_dir("jsonl_path", self.jsonl_path)
        self.limiter()
        if type(self) is AlertOptions:
            self.engine()  # validates `rules`; subclasses may need their fields

    @classmethod
    def of(cls, value: Any, argument: str = "alerts") -> AlertOptions | None:
        """`value` as alert options: an `AlertOptions`; a dict of its fields;
        True or None for the defaults; False for no alerts (None back).

        Example:

        >>> AlertOptions.of({"fold_steps": None}).fold_steps is None
        True
        >>> AlertOptions.of(False) is None
        True
        """
        if value is False:
            return None
        if value is None or value is True:
            return cls()
        if isinstance(value, AlertOptions):
            return value
        if isinstance(value, Mapping):
            return with_overrides(cls, None, value, f"`{argument}`")
        raise ValueError(
            f"`{argument}` must be an AlertOptions, a dict of its fields, True "
            f"or False. Received: {argument}={value!r}"
        )

    @classmethod
    def build(
        cls,
        config: Any = None,
        alerts: AlertOptions | Mapping[str, Any] | bool | None = None,
        owner: str | None = None,
        **options: Any,
    ) -> Any:
        """These options put together the one way every monitor takes them:
        `config` (an instance, a dict of its fields, or the path of a JSON or
        YAML config file: its `alerts` section, then its own `SECTION`),
        then `alerts` (an `AlertOptions`, a dict of its fields, or False for
        no alerts) for the alert fields, then keyword `options` on top.
        Errors name `owner` (and the file).

        Example:

        >>> AlertOptions.build({"fold_steps": 10}, cooldown_steps=5).fold_steps
        10
        """
        owner = owner or cls.__name__
        path = os.fspath(config) if isinstance(config, (str, os.PathLike)) else None
        if path is not None:
            config = cls._file_options(path)
        given: dict[str, Any] = {}
        if isinstance(config, Mapping):
            given, config = dict(config), None
        if alerts is not None:  # over the config's, under the options'
            given.update(_alert_fields(alerts, owner, options))
        try:
            return with_overrides(cls, config, {**given, **options}, owner)
        except ValueError as error:
            if path is None:
                raise
            raise type(error)(f"{error} (in {path!r})") from None

    @classmethod
    def _file_options(cls, path: str) -> dict[str, Any]:
        """The options of this class in the config file at `path`: its own
        section, over the `alerts` section (the alert options of every
        monitor)."""
        from keras_gradmon.core.config import read_section

        shared = {} if cls.SECTION == "alerts" else read_section(path, "alerts")
        return {**shared, **read_section(path, cls.SECTION)}

    def fields(self) -> dict[str, Any]:
        """The alert options by name (those of `AlertOptions` alone)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(AlertOptions)}

    def default_rules(self) -> Any:
        """The rules of `rules=None`: the gradient monitor's defaults."""
        from keras_gradmon.alerts.defaults import default_rules

        return default_rules()

    def limiter(self) -> RateLimiter:
        """The alerts' rate limiter (validates its two options)."""
        return RateLimiter(
            cooldown_steps=self.cooldown_steps, max_per_rule=self.max_per_rule
        )

    def engine(self) -> AlertEngine:
        """A fresh alert engine: the rules (`default_rules()` for None) and
        the limiter."""
        rules = self.default_rules() if self.rules is None else self.rules
        return AlertEngine(rules, self.limiter())

    def delivery(
        self, hub: Hub | None = None, log_dir: Any = None, writer: Any = None
    ) -> AlertDelivery:
        """Where the alerts go: the flags and texts to `hub`, else to
        TensorBoard at `log_dir` (or through `writer`); log lines, JSON
        lines and actions as these options say. The alerts' source is the
        monitor's kind: "gradients" for these options, the `SECTION` of a
        subclass's ("activations")."""
        return AlertDelivery(
            self.actions,
            log_dir=log_dir,
            writer=writer,
            jsonl_path=self.jsonl_path,
            hub=hub,
            fold_steps=self.fold_steps,
            source=GRADIENTS if self.SECTION == AlertOptions.SECTION else self.SECTION,
        )


def _alert_fields(alerts: Any, owner: str, options: Mapping[str, Any]) -> dict:
    """The alert fields `alerts` stands for (no rules for False), refusing
    the same field given one by one too."""
    chosen = AlertOptions.of(alerts)
    fields = chosen.fields() if chosen is not None else {"rules": ()}
    both = sorted(set(ALERT_FIELDS) & set(options))
    if both:
        raise ValueError(
            f"{owner} got the alert options both in `alerts` and one by one "
            f"({', '.join(both)}): pass them in `alerts`. Received: "
            f"alerts={alerts!r}"
        )
    return fields


#: The fields of `AlertOptions`, which the monitors' options share.
ALERT_FIELDS: tuple[str, ...] = (
    "rules",
    "actions",
    "jsonl_path",
    "cooldown_steps",
    "max_per_rule",
    "fold_steps",
)


class AlertChecker:
    """Checks the alert rules against a monitored optimizer's statistics.

    The call for training outside `model.fit`: after a custom-loop step or
    an `agent.train(...)` call, `checker.check()` has the monitor's writer
    (`keras_gradmon.writer.MonitorWriter`, the one reader of its state)
    publish every summary recorded since, and returns the alerts the rules
    raised on them, after logging them and running their tier's action.
    The rules see every summary the writer publishes once the checker is
    made (by `check()`, or by another reader of the same monitor, such as
    `write_summaries`).

    Args:
        optimizer: A monitored optimizer (any wrapper), or an optimizer
            wrapping one.
        alerts: The `AlertOptions` (or a dict of them); the options below
            one by one are the older spelling of the same.
        log_dir: Where to write `alerts/<rule>` (0 or 1 at each summary);
            or `writer`, an existing `tf.summary` writer; or `hub`, a
            `keras_gradmon.hub.Hub` whose recorders get them. None: none.
        rules, actions, jsonl_path, cooldown_steps, max_per_rule,
            fold_steps: `AlertOptions` fields, when `alerts` is not given.

    Example:

    ```python
    checker = keras_gradmon.AlertChecker(
        optimizer, alerts=AlertOptions(actions={"critical": "raise"}))
    for experience in dataset:
        agent.train(experience)
        checker.check()
    ```
    """

    def __init__(
        self,
        optimizer: Any,
        rules: Mapping[str, Rule] | Sequence[Rule] | None = None,
        actions: Mapping[str, Action] | None = None,
        log_dir: str | None = None,
        writer: Any = None,
        jsonl_path: str | None = None,
        cooldown_steps: int = 0,
        max_per_rule: int | None = None,
        hub: Hub | None = None,
        fold_steps: int | None = DEFAULT_FOLD_STEPS,
        *,
        alerts: AlertOptions | Mapping[str, Any] | None = None,
    ) -> None:
        if alerts is None:
            alerts = AlertOptions(
                rules=rules,
                actions=actions,
                jsonl_path=jsonl_path,
                cooldown_steps=cooldown_steps,
                max_per_rule=max_per_rule,
                fold_steps=fold_steps,
            )
        options = AlertOptions.of(alerts)
        delivery = options.delivery(hub, log_dir, writer)
        self._attach(optimizer, options.engine(), delivery)

    @classmethod
    def from_parts(
        cls, optimizer: Any, engine: AlertEngine, delivery: AlertDelivery
    ) -> AlertChecker:
        """A checker of `optimizer` with an engine and a delivery made (and
        validated) beforehand (`AlertOptions.engine`, `.delivery`)."""
        checker = cls.__new__(cls)
        checker._attach(optimizer, engine, delivery)
        return checker

    def _attach(
        self, optimizer: Any, engine: AlertEngine, delivery: AlertDelivery
    ) -> None:
        from keras_gradmon.wrapping import find_monitored
        from keras_gradmon.writer import MonitorWriter

        self.optimizer = find_monitored(optimizer)
        monitor = self.optimizer.monitor
        self.engine = engine
        self.delivery = delivery
        delivery.tag_scope = monitor.config.tag_scope
        delivery.writes = lambda: chief_writes(monitor.state.scalars.steps)
        # The rules listen to what the writer publishes, on a hub of their
        # own: the numbers are the writer's to record, the flags go to the
        # delivery's hub.
        runner = AlertRunner(engine, delivery)

        def run(publication: Publication) -> list[Alert]:
            delivery.tag_scope = monitor.tags.scope  # a derived one too
            return runner(publication)

        self.listening = Hub()
        self.listening.subscribe(run, origin=monitor)
        self.writer = MonitorWriter.of(monitor, self.optimizer._monitor_name())
        self.writer.link(self.listening)
        #: The step of the last summary the rules saw.
        self.checked_step = NO_STEP
        #: Whether the last `check` found summaries or histograms not
        #: published before.
        self.found = False

    @property
    def history(self) -> list[Alert]:
        """Every alert emitted so far, in order."""
        return self.engine.history

    def close(self) -> None:
        """Logs the end of the incidents still open and closes (or flushes)
        the event files; call it when training is over."""
        self.writer.write()
        self.writer.unlink(self.listening)
        self.delivery.close()

    @property
    def stop_requested(self) -> bool:
        """Whether an alert with the "stop" action has fired."""
        return self.delivery.stop_requested

    def check(self) -> list[Alert]:
        """Runs the rules on every summary recorded since the last check, in
        step order; returns their alerts.

        Raises:
            GradientAlertError: When an alert's tier has the "raise" action.
        """
        monitor = self.optimizer.monitor
        if not monitor.built:
            return []
        self.delivery.tag_scope = monitor.tags.scope  # derived ones too
        before = len(self.engine.history)
        self.found = self.writer.write()
        if self.writer.latest is not None:
            self.checked_step = self.writer.latest.step
        return self.engine.history[before:]
