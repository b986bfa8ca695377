"""Activation alert scenarios on a real Keras model (TensorFlow backend),
shared by `tests/alerts/test_activation_onset.py` and the alert benchmarks.

`dead_relu_onset`: a ReLU layer that dies during training. A 20-64-64-3
ReLU MLP (Keras defaults, Adam 1e-3, batch 32, standardized inputs) trains;
after the update that ends step `onset - 1` the bias of its layer "h2" is
set to -100, so from step `onset` on every unit of "h2" outputs 0 on every
input and never recovers (its gradients are 0). `ActivationMonitorCallback`
measures a 256-sample held-out probe batch every `every_n_steps` steps, at
its default rules. Expected: no activation alert before the onset; a
dead-unit warning on "h2" at the first summary at or after `onset`,
critical from the next one (100% dead for 2 summaries).

Import it from a benchmark script (`benchmarks/` is on `sys.path` there) as
`from _activation_scenarios import dead_relu_onset`, from the tests as
`from benchmarks._activation_scenarios import dead_relu_onset`.
"""

from __future__ import annotations

import logging
from typing import Any

import keras
import numpy as np

from keras_gradmon import ActivationMonitorCallback
from keras_gradmon.alerts import Alert

FEATURES, CLASSES, BATCH = 20, 3, 32
#: The bias the onset gives every unit of the ReLU layer `DEAD_LAYER`: far
#: below its pre-activations (std about 0.7), so no unit fires again.
DEAD_BIAS = -100.0
DEAD_LAYER = "h2"


def _data(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Standardized inputs and the class of a fixed random linear map."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, FEATURES)).astype("float32")
    w = np.random.default_rng(1234).normal(size=(FEATURES, CLASSES))
    return x, (x @ w).argmax(axis=1)


def _model(seed: int) -> keras.Model:
    """20-64-64-3 ReLU MLP, Keras's default (Glorot-uniform) init, Adam."""
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(64, activation="relu", name="h1"),
            keras.layers.Dense(64, activation="relu", name=DEAD_LAYER),
            keras.layers.Dense(CLASSES, name="head"),
        ]
    )
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


class _KillAt(keras.callbacks.Callback):
    """Sets the bias of `DEAD_LAYER` to `DEAD_BIAS` after the update that
    brings the optimizer's step count to `onset`: step `onset` is the first
    to start from the dead layer."""

    def __init__(self, onset: int) -> None:
        super().__init__()
        self.onset = onset

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if int(self.model.optimizer.iterations) == self.onset:
            bias = self.model.get_layer(DEAD_LAYER).bias
            bias.assign(np.full(bias.shape, DEAD_BIAS, "float32"))


class _Lines(logging.Handler):
    """Keeps the messages logged to "keras_gradmon" (the console)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _rule_name(callback: ActivationMonitorCallback, alert: Alert) -> str:
    """The name the engine knows `alert`'s rule by ("dead_units", ...)."""
    for name, rule in callback.monitor.engine.rules.items():
        if rule.name == alert.rule and rule.metric == alert.metric:
            return name
    return alert.rule


def _fit_logged(
    model: keras.Model, x: np.ndarray, y: np.ndarray, callbacks: list
) -> list[str]:
    """Trains one epoch in order; returns the lines logged to "keras_gradmon"."""
    lines = _Lines()
    logger = logging.getLogger("keras_gradmon")
    logger.addHandler(lines)
    try:
        model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0, callbacks=callbacks)
    finally:
        logger.removeHandler(lines)
    return lines.lines


def dead_relu_onset(
    steps: int = 300, onset: int = 150, every_n_steps: int = 1, seed: int = 0
) -> dict[str, Any]:
    """Trains a ReLU MLP whose layer "h2" dies at step `onset` (see the
    module's docstring), with `ActivationMonitorCallback` at its defaults.

    Args:
        steps: Train steps (one epoch of `steps` batches).
        onset: The first step that starts from the dead layer (>= 1).
        every_n_steps: The activation summaries' period.
        seed: Seeds the weights and the data.

    Returns:
        `{"onset": onset, "alerts": [(step, rule, tier), ...], "lines":
        [console line, ...], "subjects": [layer, ...]}`: every activation
        alert in order (rule as the engine names it: "dead_units",
        "activation_std"), the layer of each, and the lines logged to
        "keras_gradmon".

    Raises:
        RuntimeError: On a Keras backend other than TensorFlow (on JAX `fit`
            keeps the weights outside the variables, so the onset's
            assignment would not reach the train step).

    Example:

    >>> run = dead_relu_onset(steps=40, onset=20, every_n_steps=5)  # doctest: +SKIP
    >>> run["alerts"][0]  # doctest: +SKIP
    (20, 'dead_units', 'warning')
    """
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            "dead_relu_onset runs on the TensorFlow backend. Received: "
            f"keras.backend.backend()={keras.backend.backend()!r}"
        )
    model = _model(seed)
    x, y = _data(steps * BATCH, seed)
    probe, _ = _data(256, seed + 1)
    callback = ActivationMonitorCallback(
        probe, every_n_steps=every_n_steps, histogram_buckets=None
    )
    lines = _fit_logged(model, x, y, [_KillAt(onset), callback])
    alerts = callback.alerts
    return {
        "onset": onset,
        "alerts": [(a.step, _rule_name(callback, a), a.tier) for a in alerts],
        "subjects": [a.subject for a in alerts],
        "lines": lines,
    }
