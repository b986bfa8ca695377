"""`AlertRunner`: feeds a monitor's publications to its alert engine and
delivers what fires (`AlertDelivery`): log lines grouped into incidents,
`alerts/<rule>` flags and alert texts through a `Hub`, JSON Lines, and the
action of the alert's tier."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from keras_gradmon.alerts import CRITICAL, TIERS, WARNING, Alert, AlertEngine
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import ALERT_LOG
from keras_gradmon.alerts.incidents import DEFAULT_FOLD_STEPS, IncidentLog
from keras_gradmon.alerts.limiter import RateLimiter
from keras_gradmon.hub import ALERTS, Hub, Publication, recording_hub
from keras_gradmon.recorders.tensorboard import check_log_dir
from keras_gradmon.tags import tag

#: What to do when an alert of a tier fires: "log" (only the log line),
#: "stop" (end `fit` after this batch, as `TerminateOnNaN` does), "raise"
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
    flags and the alerts as JSON text (`alert_log/all`) published to a
    `Hub` (source "alerts", so every recorder of the hub gets them), JSON
    Lines, and each tier's action. Every alert is recorded and acted on;
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
    ) -> None:
        self.actions = validate_actions(actions)
        self.incidents = IncidentLog(fold_steps)
        self.writes = writes or (lambda: True)
        self._owns_hub = hub is None
        self.hub = recording_hub(log_dir, writer, hub)
        self.jsonl_path = jsonl_path
        self.tag_scope = tag_scope
        self.stop_requested = False

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
        # The alerts themselves, for `keras-gradmon report` and TensorBoard's
        # Text dashboard: one JSON object per line.
        texts = {}
        if alerts:
            lines = [json.dumps(alert.to_dict()) for alert in alerts]
            texts[tag(ALERT_LOG, "all", self.tag_scope)] = lines
        # Written where this process writes summaries (the chief); the
        # hub's listeners get the flags anyway.
        record = bool(self.hub.recorders) and self.writes()
        self.hub.publish(
            Publication(step, ALERTS, flags, texts=texts, origin=self, record=record)
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


def alerting(
    rules: Mapping[str, Rule] | Sequence[Rule] | None = None,
    actions: Mapping[str, Action] | None = None,
    log_dir: str | None = None,
    writer: Any = None,
    jsonl_path: str | None = None,
    cooldown_steps: int = 0,
    max_per_rule: int | None = None,
    hub: Hub | None = None,
    fold_steps: int | None = DEFAULT_FOLD_STEPS,
) -> tuple[AlertEngine, AlertDelivery]:
    """The engine and the delivery of an alert checker, every argument
    checked (so that callbacks fail at construction, not at `fit`)."""
    engine = AlertEngine(
        rules, RateLimiter(cooldown_steps=cooldown_steps, max_per_rule=max_per_rule)
    )
    if jsonl_path is not None:
        check_log_dir("jsonl_path", jsonl_path)
    delivery = AlertDelivery(
        actions,
        log_dir=log_dir,
        writer=writer,
        jsonl_path=jsonl_path,
        hub=hub,
        fold_steps=fold_steps,
    )
    return engine, delivery
