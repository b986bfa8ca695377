"""`AlertChecker`: runs the alert rules on each fresh summary of a monitored
optimizer and delivers what fires: log line, TensorBoard flag, JSON Lines,
and the action of the alert's tier."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from keras_gradmon import distribute
from keras_gradmon.alerts import CRITICAL, TIERS, WARNING, Alert, AlertEngine
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import ALERT_LOG
from keras_gradmon.alerts.limiter import RateLimiter
from keras_gradmon.history import Cursor, unpack
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder, check_log_dir
from keras_gradmon.state import NO_STEP, Snapshot
from keras_gradmon.tags import GLOBAL, tag

#: What to do when an alert of a tier fires: "log" (only the log line),
#: "stop" (end `fit` after this batch, as `TerminateOnNaN` does), "raise"
#: (`GradientAlertError`), or a callable taking the `Alert`.
Action = str | Callable[[Alert], Any]
ACTIONS = ("log", "stop", "raise")

logger = logging.getLogger("keras_gradmon")


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


def summary_metrics(snapshot: Snapshot) -> dict[str, dict[str, float]]:
    """The numbers the rules read, from one snapshot: `grad_norm` and
    `grad_nonfinite` of "global", each group and each variable with a
    gradient."""
    norms = {GLOBAL: snapshot.totals["grad_norm"]}
    norms.update(zip(snapshot.groups, map(float, snapshot.group_grad_norm)))
    norms.update(snapshot.grad_stat("norm"))
    nonfinite = snapshot.grad_stat("nonfinite")
    return {"grad_norm": norms, "grad_nonfinite": nonfinite}


class AlertDelivery:
    """Delivers what an `AlertEngine` raised: a log line per alert (logger
    "keras_gradmon"), `alerts/<rule>` flags and the alerts as JSON text
    (`alert_log/all`) in TensorBoard, JSON Lines, and each tier's action.
    Shared by the gradient and the activation alerts.

    Args:
        actions: `{tier: action}`; see `Action`.
        log_dir: Where to write `alerts/<rule>` (0 or 1 at each summary);
            or `writer`, an existing `tf.summary` writer. Neither: none.
        jsonl_path: Append each alert as one JSON line to this file.
        tag_scope: Inserted in the flags' tags (`alerts/<scope>/<rule>`).
        writes: Says whether this process writes TensorBoard summaries
            (False on the non-chief workers of a multi-worker strategy);
            None: always. Logging, JSON Lines and actions happen anyway.

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
    ) -> None:
        self.actions = validate_actions(actions)
        self.writes = writes or (lambda: True)
        self.recorder = (
            TensorBoardRecorder(log_dir=log_dir, writer=writer)
            if log_dir is not None or writer is not None
            else None
        )
        self.jsonl_path = jsonl_path
        self.tag_scope = tag_scope
        self.stop_requested = False

    def close(self) -> None:
        """Closes the event file of the flags (a later write reopens it)."""
        if self.recorder is not None:
            self.recorder.close()

    def deliver(self, step: int, alerts: list[Alert], engine: AlertEngine) -> None:
        """Logs, records and acts on the `alerts` `engine` raised at `step`.

        Raises:
            GradientAlertError: When an alert's tier has the "raise" action.
        """
        for alert in alerts:
            level = logging.CRITICAL if alert.tier == CRITICAL else logging.WARNING
            logger.log(level, alert.message)
        if self.jsonl_path and alerts:
            with open(self.jsonl_path, "a", encoding="utf-8") as file:
                for alert in alerts:
                    file.write(json.dumps(alert.to_dict()) + "\n")
        if self.recorder is not None and self.writes():
            self.recorder.write_scalars(
                {
                    tag("alerts", name, self.tag_scope): float(name in engine.fired)
                    for name in engine.rules
                },
                step,
            )
            if alerts:
                # The alerts themselves, for `keras-gradmon report` and
                # TensorBoard's Text dashboard: one JSON object per line.
                self.recorder.write_text(
                    tag(ALERT_LOG, "all", self.tag_scope),
                    [json.dumps(alert.to_dict()) for alert in alerts],
                    step,
                )
            self.recorder.flush()
        for alert in alerts:
            action = self.actions[alert.tier]
            if action == "stop":
                self.stop_requested = True
            elif action == "raise":
                raise GradientAlertError(alert)
            elif callable(action):
                action(alert)


class AlertChecker:
    """Checks the alert rules against a monitored optimizer's statistics.

    The call for training outside `model.fit`: after a custom-loop step or
    an `agent.train(...)` call, `checker.check()` looks at the newest
    summary (two small host reads when there is none) and returns the
    alerts it raised, after logging them and running their tier's action.

    Args:
        optimizer: A `GradientMonitorOptimizer` (Keras 3 or tf_keras), or an
            optimizer wrapping one.
        rules: Rules by name (or a list); None for
            `keras_gradmon.alerts.default_rules()`.
        actions: `{tier: action}` for "warning" and "critical"; each "log"
            (default), "stop", "raise" or a callable taking the `Alert`.
        log_dir: Where to write `alerts/<rule>` (0 or 1 at each summary);
            or `writer`, an existing `tf.summary` writer. Neither: none.
        jsonl_path: Append each alert as one JSON line to this file.
        cooldown_steps: The same rule, tier and subject is not reported
            again within this many steps (a critical passes a warning's).
        max_per_rule: At most this many alerts per rule and tier.

    Example:

    ```python
    checker = keras_gradmon.AlertChecker(
        optimizer, rules=[ThresholdRule(warning=1e4, critical=5e4)],
        actions={"critical": "raise"})
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
    ) -> None:
        engine, delivery = alerting(
            rules, actions, log_dir, writer, jsonl_path, cooldown_steps, max_per_rule
        )
        self._attach(optimizer, engine, delivery)

    @classmethod
    def from_parts(
        cls, optimizer: Any, engine: AlertEngine, delivery: AlertDelivery
    ) -> AlertChecker:
        """A checker of `optimizer` with an engine and a delivery made (and
        validated) beforehand, by `alerting`."""
        checker = cls.__new__(cls)
        checker._attach(optimizer, engine, delivery)
        return checker

    def _attach(
        self, optimizer: Any, engine: AlertEngine, delivery: AlertDelivery
    ) -> None:
        from keras_gradmon.adapters.base import find_monitored

        self.optimizer = find_monitored(optimizer)
        monitor = self.optimizer.monitor
        self.engine = engine
        self.delivery = delivery
        delivery.tag_scope = monitor.config.tag_scope
        delivery.writes = lambda: distribute.writes_summaries(
            monitor.state.scalars.count
        )
        #: The step of the last summary the rules saw.
        self.checked_step = NO_STEP
        self._cursor: Cursor | None = None

    @property
    def history(self) -> list[Alert]:
        """Every alert emitted so far, in order."""
        return self.engine.history

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
        if self._cursor is None:
            self._cursor = Cursor(monitor.layout.history)
        if monitor.state.scalars.read_count() <= self._cursor.seen:
            return []
        entries, _ = self._cursor.new(*unpack(monitor.state.capture_scalars()))
        alerts: list[Alert] = []
        for entry in entries:
            snapshot = monitor.scalar_values(entry.step, *entry.payloads)
            self.checked_step = snapshot.step
            fired = self.engine.update(snapshot.step, summary_metrics(snapshot))
            self.delivery.deliver(snapshot.step, fired, self.engine)
            alerts += fired
        return alerts


def alerting(
    rules: Mapping[str, Rule] | Sequence[Rule] | None = None,
    actions: Mapping[str, Action] | None = None,
    log_dir: str | None = None,
    writer: Any = None,
    jsonl_path: str | None = None,
    cooldown_steps: int = 0,
    max_per_rule: int | None = None,
) -> tuple[AlertEngine, AlertDelivery]:
    """The engine and the delivery of an alert checker, every argument
    checked (so that callbacks fail at construction, not at `fit`)."""
    engine = AlertEngine(
        rules, RateLimiter(cooldown_steps=cooldown_steps, max_per_rule=max_per_rule)
    )
    if log_dir is not None and writer is not None:
        raise ValueError(
            "Pass at most one of `log_dir` and `writer`. Received: "
            f"log_dir={log_dir!r}, writer={writer!r}"
        )
    if jsonl_path is not None:
        check_log_dir("jsonl_path", jsonl_path)
    delivery = AlertDelivery(
        actions, log_dir=log_dir, writer=writer, jsonl_path=jsonl_path
    )
    return engine, delivery
