"""`GradientAlertCallback`: alerts on exploding, vanishing and non-finite
gradients during `fit`, and optionally stops or fails training."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import keras

from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.delivery import Action, AlertChecker, alerting
from keras_gradmon.alerts.events import Alert
from keras_gradmon.alerts.incidents import DEFAULT_FOLD_STEPS
from keras_gradmon.callbacks.dispatch import BatchReads
from keras_gradmon.callbacks.steps import (
    StepTracker,
    monitored_optimizer,
    optimizer_step,
)
from keras_gradmon.hub import Hub


class GradientAlertCallback(BatchReads, keras.callbacks.Callback):
    """Runs alert rules on each fresh summary of a `GradientMonitorOptimizer`.

    Each alert is an entry of `alerts`, an `alerts/<rule>` scalar (0 or 1
    at each summary) when `log_dir` or `writer` is given and, optionally, a
    JSON line. On the console (logger "keras_gradmon") alerts are grouped
    into incidents: the first of each (rule, subject, tier) is one readable
    line, its repeats fold into a few lines (see `fold_steps`).
    Keras `logs` get `grad_alerts`, the number of alerts so far. The tier's
    action then runs: "log", "stop" (sets `model.stop_training`, as
    `TerminateOnNaN` does), "raise" (`GradientAlertError` with the step, rule
    and value) or a callable taking the `Alert`.

    Rules see each summary once (a rule never fires again on numbers it has
    seen); a diverging run logs a handful of lines, not one per step.
    `cooldown_steps` / `max_per_rule` thin out the alerts themselves.

    Args:
        rules: Rules by name (or a list); None for
            `keras_gradmon.alerts.default_rules()` (non-finite gradients,
            10x growth within 3 summaries, spikes, also between summaries,
            skipped spikes, more than half of the last 1,000 steps clipped,
            an update/weight ratio out of band).
        actions: `{"warning": action, "critical": action}`; "log" by default.
        optimizer: The monitored optimizer; defaults to `model.optimizer`.
        log_dir: Directory for the `alerts/<rule>` scalars, or `writer`.
        writer: An existing `tf.summary` writer.
        jsonl_path: Append each alert as a JSON line to this file.
        cooldown_steps: Do not repeat the same rule, tier and subject within
            this many steps.
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
    from keras_gradmon.alerts import ThresholdRule
    model.fit(x, y, callbacks=[keras_gradmon.GradientAlertCallback(
        rules=[ThresholdRule(warning=1e4, critical=5e4)],
        actions={"critical": "stop"})])
    ```
    """

    def __init__(
        self,
        rules: Mapping[str, Rule] | Sequence[Rule] | None = None,
        actions: Mapping[str, Action] | None = None,
        optimizer: Any = None,
        log_dir: str | None = None,
        writer: Any = None,
        jsonl_path: str | None = None,
        cooldown_steps: int = 0,
        max_per_rule: int | None = None,
        hub: Hub | None = None,
        fold_steps: int | None = DEFAULT_FOLD_STEPS,
    ) -> None:
        super().__init__()
        # Every argument is checked now, not when `fit` starts.
        self._engine, self._delivery = alerting(
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
        self._optimizer = optimizer
        self.checker: AlertChecker | None = None
        self._steps = StepTracker()
        self._pending = False

    @property
    def alerts(self) -> list[Alert]:
        """Every alert emitted so far, in order."""
        return self._engine.history

    def on_train_begin(self, logs: dict | None = None) -> None:
        if self.checker is None:
            monitored = monitored_optimizer(
                type(self).__name__, self._optimizer, self.model
            )
            self.checker = AlertChecker.from_parts(
                monitored, self._engine, self._delivery
            )
        optimizer = self.checker.optimizer
        self._steps = StepTracker(read=lambda: optimizer_step(optimizer))
        self._pending = False
        self._start_reads()

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._steps.start_epoch(optimizer_step(self.checker.optimizer))

    def _batch_logs(self, logs: dict | None) -> None:
        self._update_logs(logs)

    def _read_batch(self, batch: int) -> None:
        """Checks the rules if a summary can be among the steps up to the
        end of `batch`."""
        first, end = self._steps.batch_end(batch)
        schedule = self.checker.optimizer.monitor.schedule
        if schedule.any_due(first, end) or self._pending:
            # Not found: a skipped step delayed it; look until it shows up.
            self._pending = not self._check()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._check()
        self._update_logs(logs)

    def on_train_end(self, logs: dict | None = None) -> None:
        self._delivery.close()

    def _check(self) -> bool:
        before = self.checker.checked_step
        self.checker.check()
        if self.checker.stop_requested:
            self.model.stop_training = True
        return self.checker.checked_step != before

    def _update_logs(self, logs: dict | None) -> None:
        if logs is not None:
            logs["grad_alerts"] = float(len(self.alerts))
