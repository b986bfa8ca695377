"""`ActivationMonitorCallback`: activation statistics and dead-ReLU tracking
during `fit`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import keras

from keras_gradmon import defaults
from keras_gradmon.activations.monitor import ActivationMonitor, HostFrequency
from keras_gradmon.activations.options import ActivationOptions
from keras_gradmon.alerts import Alert
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.runner import Action
from keras_gradmon.callbacks.steps import StepTracker, optimizer_step


class ActivationMonitorCallback(keras.callbacks.Callback):
    """Records the activations of a model's layers during `fit`.

    Before the train steps 0, N, 2N, ... it runs the model once on the probe
    batch `data` (inference mode), and writes per watched layer the mean,
    std, min, max, fraction of zeros, dead-unit fraction, saturation (tanh,
    sigmoid) and a histogram under `activation_<stat>/<layer>` and
    `activation_hist/<layer>`. The step is the optimizer's iteration count,
    so activations and gradients of one step sit side by side in
    TensorBoard: both describe the weights that step started from. Other
    batches cost nothing: the callback counts them without touching the
    device. Std outside the healthy band and dead units raise alerts (see
    `ActivationMonitor`).

    Args:
        data: The probe batch of model inputs (a few hundred held-out
            samples): the window over which a unit must stay at zero to
            count as dead.
        log_dir: Directory of the event file; or `writer`, an existing
            `tf.summary` writer.
        writer: See `log_dir`.
        layers: None for every layer with a hidden activation; a list of
            layer names; or a regex. Unknown names are an error listing
            the model's layers (when the model is known: at construction
            with `model=`, else when `fit` starts).
        every_n_steps: Measure every N steps, or a callable from the step
            to a bool.
        histogram_buckets: Histogram buckets, or None for no histograms.
        std_band: Healthy `(low, high)` activation std; None: no alert.
        dead_fraction: Warn above this fraction of dead units; None: no
            alert.
        rules: Alert rules replacing the two defaults; `{}` for none.
        actions: `{tier: action}`: "log" (default), "stop", "raise" or a
            callable.
        jsonl_path: Append each alert as one JSON line to this file.
        cooldown_steps: Do not repeat an alert within this many steps.
        max_per_rule: At most this many alerts per rule and tier.
        tag_scope: Inserted after the statistic in every tag.
        model: The model, when known before `fit` (checks `layers` now).

    Example:

    ```python
    model.fit(x, y, callbacks=[keras_gradmon.ActivationMonitorCallback(
        x_val[:256], log_dir="logs/activations", every_n_steps=100)])
    ```
    """

    def __init__(
        self,
        data: Any,
        log_dir: str | None = None,
        writer: Any = None,
        layers: str | Sequence[str] | None = None,
        every_n_steps: HostFrequency = defaults.ACTIVATION_EVERY_N_STEPS,
        histogram_buckets: int | None = defaults.ACTIVATION_HISTOGRAM_BUCKETS,
        std_band: tuple[float, float] | None = defaults.STD_BAND,
        dead_fraction: float | None = defaults.DEAD_FRACTION,
        rules: Mapping[str, Rule] | Sequence[Rule] | None = None,
        actions: Mapping[str, Action] | None = None,
        jsonl_path: str | None = None,
        cooldown_steps: int = 0,
        max_per_rule: int | None = None,
        tag_scope: str | None = None,
        model: Any = None,
    ) -> None:
        super().__init__()
        # Everything that can be checked without the model, checked now.
        self._options = ActivationOptions(
            data,
            layers,
            every_n_steps,
            histogram_buckets,
            std_band,
            dead_fraction,
            rules,
            actions,
            log_dir,
            writer,
            jsonl_path,
            cooldown_steps,
            max_per_rule,
            tag_scope,
        )
        self.monitor: ActivationMonitor | None = None
        self._steps = StepTracker()
        self._previous: int | None = None
        if model is not None:
            self.set_model(model)

    @property
    def alerts(self) -> list[Alert]:
        """Every activation alert emitted so far, in order."""
        return self.monitor.alerts if self.monitor else []

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        if self.monitor is None or self._monitored_model is not model:
            self.monitor = ActivationMonitor(model, **self._options.as_kwargs())
            self._monitored_model = model

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._previous = None

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        # One host read an epoch (exact even after skipped steps); batches
        # are then counted from it, with no device access.
        optimizer = getattr(self.model, "optimizer", None)
        has_step = getattr(optimizer, "iterations", None) is not None
        self._steps.start_epoch(optimizer_step(optimizer) if has_step else 0)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        step = self._steps.batch_start(batch)
        # With `steps_per_execution` a batch covers several steps: a due
        # step inside the previous one is measured at this batch's start.
        first = step if self._previous is None else self._previous + 1
        latest = self.monitor.latest
        fresh = latest is None or latest.step != step
        if fresh and self.monitor.schedule.any_due(first, step + 1):
            self.monitor.record(step)
            if self.monitor.stop_requested:
                self.model.stop_training = True
        self._previous = step

    def on_train_end(self, logs: dict | None = None) -> None:
        self.monitor.close()
