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

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.engine import AlertEngine, RateLimiter
from keras_gradmon.alerts.events import (
    ALERT_LOG,
    CRITICAL,
    TIERS,
    WARNING,
    Alert,
)
from keras_gradmon.alerts.incidents import DEFAULT_FOLD_STEPS, IncidentLog
from keras_gradmon.columns import (
    GLOBAL,
    NO_STEP,
    Cursor,
    TagTable,
    parse,
    tag,
    unpack,
    variable_statistic,
)
from keras_gradmon.hub import (
    ALERTS,
    GRADIENTS,
    Hub,
    Publication,
    chief_writes,
    recording_hub,
)
from keras_gradmon.recorders.tensorboard import check_log_dir

if TYPE_CHECKING:
    from keras_gradmon.columns import Snapshot


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


#: The metrics `summary_metrics` builds itself, per variable too.
_NORM_METRICS = ("grad_norm", "grad_nonfinite")


class TaggedMetrics:
    """The other scalar tags of a monitor's summaries, as rule metrics:
    `<statistic>/<subject>` (`clip/fraction`, `update_ratio/<group>`,
    `spikes/max_norm`, `skipped/spikes`, ...) becomes
    `metrics[statistic][subject]`. Per-variable subjects are left out: the
    rules read global, group and step-wide values.

    Example:

    >>> TaggedMetrics(monitor.tags, monitor.paths).of(snapshot)  # doctest: +SKIP
    {'clip': {'pre_norm': 2.0, 'post_norm': 1.0, 'scale': 0.5, 'fraction': 1.0}}
    """

    def __init__(self, table: TagTable, paths: tuple[str, ...] | list[str]) -> None:
        self.table = table
        scopes = () if table.scope is None else (table.scope,)
        variables = set(paths)
        self._parsed = {}
        for scalar in table.scalars:
            parsed = parse(scalar.tag, scopes)
            if not (
                parsed.statistic in _NORM_METRICS
                or variable_statistic(parsed.statistic)
                or parsed.subject in variables
            ):
                self._parsed[scalar.tag] = parsed

    def of(self, snapshot: Snapshot) -> dict[str, dict[str, float]]:
        """The metrics of one summary."""
        values = self.table.values_of(snapshot.values, snapshot.has_grad, self._parsed)
        metrics: dict[str, dict[str, float]] = {}
        for name, value in values.items():
            parsed = self._parsed[name]
            metrics.setdefault(parsed.statistic, {})[parsed.subject] = value
        return metrics


def summary_metrics(
    snapshot: Snapshot, tagged: TaggedMetrics | None = None
) -> dict[str, dict[str, float]]:
    """The numbers the rules read, from one snapshot: `grad_norm` and
    `grad_nonfinite` of "global", each group and each variable with a
    gradient; with `tagged`, the monitor's other scalar tags too (see
    `TaggedMetrics`)."""
    norms = {GLOBAL: snapshot.totals["grad_norm"]}
    norms.update(zip(snapshot.groups, map(float, snapshot.group_grad_norm)))
    norms.update(snapshot.grad_stat("norm"))
    nonfinite = snapshot.grad_stat("nonfinite")
    metrics = {} if tagged is None else tagged.of(snapshot)
    return {**metrics, "grad_norm": norms, "grad_nonfinite": nonfinite}


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
        hub: A `keras_gradmon.hub.Hub` to publish the flags and alert texts
            to (its recorders get them), instead of `log_dir` / `writer`.
        fold_steps: The log lines group alerts into incidents (rule,
            subject, tier): the first in full, repeats folded into one line
            after `fold_steps` steps (then 2x, 4x, ... as many), one line
            when the incident ends (quiet for `fold_steps` steps). None logs
            every alert in full. The alerts themselves are all kept.

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
        hub: Hub | None = None,
        fold_steps: int | None = DEFAULT_FOLD_STEPS,
    ) -> None:
        engine, delivery = alerting(
            rules,
            actions,
            log_dir,
            writer,
            jsonl_path,
            cooldown_steps,
            max_per_rule,
            hub,
            fold_steps,
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
        from keras_gradmon.wrapping import find_monitored

        self.optimizer = find_monitored(optimizer)
        monitor = self.optimizer.monitor
        self.engine = engine
        self.delivery = delivery
        delivery.tag_scope = monitor.config.tag_scope
        delivery.writes = lambda: chief_writes(monitor.state.scalars.count)
        delivery.hub.subscribe(AlertRunner(engine, delivery), origin=self)
        #: The step of the last summary the rules saw.
        self.checked_step = NO_STEP
        self._cursor: Cursor | None = None
        self._tagged: TaggedMetrics | None = None

    def _tagged_metrics(self) -> TaggedMetrics:
        """The tag reader of the monitor's current tag table (rebuilt when
        the table is, e.g. under a derived scope)."""
        monitor = self.optimizer.monitor
        if self._tagged is None or self._tagged.table is not monitor.tags:
            self._tagged = TaggedMetrics(monitor.tags, monitor.paths)
        return self._tagged

    @property
    def history(self) -> list[Alert]:
        """Every alert emitted so far, in order."""
        return self.engine.history

    def close(self) -> None:
        """Logs the end of the incidents still open and closes (or flushes)
        the event files; call it when training is over."""
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
        if self._cursor is None:
            self._cursor = Cursor(monitor.layout.history)
        if monitor.state.scalars.read_count() <= self._cursor.seen:
            return []
        entries, _ = self._cursor.new(*unpack(monitor.state.capture_scalars()))
        before = len(self.engine.history)
        tagged = self._tagged_metrics()
        for entry in entries:
            snapshot = monitor.scalar_values(entry.step, *entry.payloads)
            self.checked_step = snapshot.step
            # For the alert runner only: the numbers are the writer's to record.
            metrics = summary_metrics(snapshot, tagged)
            publication = Publication(
                snapshot.step, GRADIENTS, metrics=metrics, origin=self, record=False
            )
            self.delivery.hub.publish(publication)
        return self.engine.history[before:]
