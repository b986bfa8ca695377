"""Real Keras runs judged by `GradientAlertCallback()` at its defaults, with
statistics every step.

Healthy runs (no alert is right): an MLP memorizing random labels (the
memory soak's model), a small transformer, a BatchNorm CNN and an LSTM,
each trained to convergence on data it can learn, their activations
measured every step too. Faulty runs (each fault
must alert at once): a learning rate that jumps 100x, a batch with a NaN
input, and a deep sigmoid stack whose gradients vanish.

Example:

>>> outcome = nan_input(steps=40, fault_step=20)  # doctest: +SKIP
>>> outcome.delay("nonfinite", "critical")  # doctest: +SKIP
0
"""

from __future__ import annotations

import keras
import numpy as np

from keras_gradmon import (
    ActivationMonitorCallback,
    GradientAlertCallback,
    GradientMonitorOptimizer,
)
from tests.scenarios import models
from tests.scenarios.running import Outcome, console

SPARSE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


class _LearningRateJump(keras.callbacks.Callback):
    """Multiplies the learning rate by `factor` before batch `at`."""

    def __init__(self, at: int, factor: float = 100.0) -> None:
        super().__init__()
        self.at, self.factor = at, factor

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if batch == self.at:
            rate = self.model.optimizer.learning_rate
            rate.assign(rate * self.factor)


def run(
    name: str,
    model: keras.Model,
    data: tuple[np.ndarray, np.ndarray],
    steps: int,
    *,
    optimizer: keras.optimizers.Optimizer,
    loss: keras.losses.Loss | str = SPARSE,
    batch_size: int = 64,
    fault_step: int | None = None,
    callbacks: list | None = None,
    alert_callback: GradientAlertCallback | None = None,
    probe: np.ndarray | None = None,
    probe_every: int = 1,
    jit_compile: bool | str = "auto",
) -> Outcome:
    """Fits `model` for `steps` steps (epochs over `data`, in order) with
    statistics every step and the default alert rules (or `alert_callback`),
    and, given a `probe` batch, the activations measured every `probe_every`
    steps at the default activation rules. The fault's `callbacks` run
    before the monitors' at each step.

    Returns:
        The `Outcome`: every alert, the console lines, the fault step.
    """
    x, y = data
    per_epoch = len(x) // batch_size
    watchers = _watchers(alert_callback, probe, probe_every)
    model.compile(
        GradientMonitorOptimizer(
            optimizer, every_n_steps=1, histogram_every_n_steps=None
        ),
        loss,
        jit_compile=jit_compile,
    )
    with console(Outcome(name, steps, fault_step)) as outcome:
        model.fit(
            x[: per_epoch * batch_size], y[: per_epoch * batch_size],
            batch_size=batch_size, epochs=-(-steps // per_epoch),
            steps_per_epoch=None, shuffle=False, verbose=0,
            callbacks=[*(callbacks or []), *watchers, _StopAt(steps)],
        )
        raised = [alert for watcher in watchers for alert in watcher.alerts]
        outcome.alerts.extend(sorted(raised, key=lambda alert: alert.step))
    outcome.final_loss = float(model.history.history["loss"][-1])
    return outcome


def _watchers(
    alerts: GradientAlertCallback | None, probe: np.ndarray | None, every: int
) -> list[keras.callbacks.Callback]:
    """The gradient alerts (default rules unless given) and, with a probe
    batch, the activation monitor every `every` steps."""
    watchers = [alerts or GradientAlertCallback()]
    if probe is not None:
        activations = ActivationMonitorCallback(
            probe, every_n_steps=every, histogram_buckets=None
        )
        watchers.append(activations)
    return watchers


class _StopAt(keras.callbacks.Callback):
    """Ends training after `steps` steps (the last epoch may be partial)."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps, self.seen = steps, 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.seen += 1
        if self.seen >= self.steps:
            self.model.stop_training = True


def memorizer(steps: int = 2000, seed: int = 0) -> Outcome:
    """The memory soak's run: a 64-512-512-10 MLP memorizing random labels
    (12,800 examples, batch 128, Adam 1e-3, XLA). The loss goes to about
    0, where the norms are small and noisy."""
    x, y = models.random_labels(seed)
    return run(
        "memorizer (soak)", models.soak_mlp(seed), (x, y), steps,
        optimizer=keras.optimizers.Adam(1e-3), batch_size=128, jit_compile=True,
        probe=x[:256],
    )


def transformer(steps: int = 3000, seed: int = 0) -> Outcome:
    """A one-block transformer classifying the largest token of a sequence."""
    data = models.largest_token(seed)
    return run(
        "transformer", models.transformer(seed), data, steps,
        optimizer=keras.optimizers.Adam(1e-3), probe=data[0][:256],
    )


def bn_cnn(steps: int = 2000, seed: int = 0) -> Outcome:
    """A BatchNorm CNN finding which quadrant of a noisy image holds a
    square."""
    data = models.quadrant_images(seed)
    return run(
        "bn_cnn", models.bn_cnn(seed), data, steps,
        optimizer=keras.optimizers.Adam(1e-3), probe=data[0][:256],
    )


def lstm(steps: int = 3000, seed: int = 0) -> Outcome:
    """An LSTM regressing the running sum of a noisy sequence."""
    data = models.sequence_sums(seed)
    return run(
        "lstm", models.lstm(seed), data, steps,
        optimizer=keras.optimizers.Adam(1e-3), loss="mse", probe=data[0][:256],
    )


def learning_rate_jump(steps: int = 1200, fault_step: int = 600) -> Outcome:
    """An MLP regression with SGD(0.01) whose learning rate jumps 100x before
    step `fault_step`: it diverges to NaN within a few steps."""
    return run(
        "learning-rate jump", models.regression_mlp(),
        models.linear_targets(steps * 8), steps,
        optimizer=keras.optimizers.SGD(0.01), loss="mse", batch_size=8,
        fault_step=fault_step, callbacks=[_LearningRateJump(fault_step)],
    )


def nan_input(steps: int = 400, fault_step: int = 200) -> Outcome:
    """The same regression, healthy, but batch `fault_step` holds a NaN
    input: its gradients are NaN at that step only (SGD then carries the
    NaN into the weights, as it would unmonitored)."""
    x, y = models.linear_targets(steps * 8)
    x[fault_step * 8, 0] = np.nan
    return run(
        "NaN input", models.regression_mlp(), (x, y), steps,
        optimizer=keras.optimizers.SGD(0.01), loss="mse", batch_size=8,
        fault_step=fault_step,
    )


def sigmoid_stack(steps: int = 300, depth: int = 12) -> Outcome:
    """A stack of `depth` sigmoid layers: the first layers' gradients are
    1e-7 of the last ones' from the first step (the fault is the model)."""
    return run(
        "deep sigmoid stack", models.sigmoid_stack(depth),
        models.random_labels(0, n=6400, features=32), steps,
        optimizer=keras.optimizers.SGD(0.01), fault_step=0,
    )
