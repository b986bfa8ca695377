"""`ActivationMonitorCallback`: activation statistics and dead-ReLU tracking
during `fit`."""

from __future__ import annotations

from typing import Any

import keras

from keras_gradmon.activations.monitor import (
    ActivationMonitor,
    ActivationOptions,
)
from keras_gradmon.alerts.events import Alert
from keras_gradmon.callbacks.steps import StepTracker, live_optimizer_step
from keras_gradmon.hub import Hub, check_hub


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
    `ActivationMonitor`). On Keras 3's JAX backend the probe and the step
    are read from the trainer's live state (`model._jax_state`), where
    `fit` keeps the weights until the epoch ends.

    Args:
        options: An `ActivationOptions`, or the probe batch `data` of model
            inputs (a few hundred held-out samples: the window over which a
            unit must stay at zero to count as dead).
        model: The model, when known before `fit` (checks `layers` now;
            unknown names are an error listing the model's layers, else
            when `fit` starts).
        hub: Publish to this `keras_gradmon.hub.Hub` (shared with the
            gradient and RL monitors) instead of one of its own.
        **overrides: Options (`ActivationOptions` fields) one by one, as
            for `ActivationMonitor`: `log_dir` / `writer`, `layers`,
            `every_n_steps`, `histogram_buckets`, `std_band`,
            `dead_fraction`, `rules`, `actions`, `jsonl_path`,
            `cooldown_steps`, `max_per_rule`, `tag_scope`, `fold_steps`.

    Example:

    ```python
    model.fit(x, y, callbacks=[keras_gradmon.ActivationMonitorCallback(
        x_val[:256], log_dir="logs/activations", every_n_steps=100)])
    ```
    """

    def __init__(
        self,
        options: ActivationOptions | Any = None,
        *,
        model: Any = None,
        hub: Hub | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__()
        # Everything that can be checked without the model, checked now.
        name = type(self).__name__
        self._options = ActivationOptions.of(options, overrides, name)
        check_hub(hub, self._options.log_dir, self._options.writer)
        self._hub = hub
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
            self.monitor = ActivationMonitor(model, self._options, hub=self._hub)
            self._monitored_model = model

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._previous = None

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        # One host read an epoch (exact even after skipped steps); batches
        # are then counted from it, with no device access.
        optimizer = getattr(self.model, "optimizer", None)
        has_step = getattr(optimizer, "iterations", None) is not None
        step = live_optimizer_step(optimizer, self.model) if has_step else 0
        self._steps.start_epoch(step)

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
