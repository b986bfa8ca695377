"""A ReLU layer that dies during training, judged by every monitor's
default rules (`tests.scenarios.gradients.run`, the activations measured
every `every_n_steps` steps).

A 20-64-64-3 ReLU MLP (Keras defaults, Adam 1e-3, batch 32, standardized
inputs) trains; after the update that ends step `onset - 1` the bias of its
layer "h2" is set to -100, so from step `onset` on every unit of "h2"
outputs 0 on every input and never recovers (its gradients are 0). A
256-sample held-out probe batch is measured. Expected: no alert before the
onset; a dead-unit warning on "h2" at the first activation summary at or
after `onset`, critical from the next one (100% dead for 2 summaries).
TensorFlow only: on JAX `fit` keeps the weights outside the variables, so
the onset's assignment would not reach the train step.

Example:

>>> outcome = dead_relu_onset(steps=40, onset=20)  # doctest: +SKIP
>>> [(a.step, a.tier) for a in outcome.alerts][:2]  # doctest: +SKIP
[(20, 'warning'), (21, 'critical')]
"""

from __future__ import annotations

import keras
import numpy as np

from tests.scenarios.gradients import run
from tests.scenarios.running import Outcome

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
    return x, (x @ w).argmax(axis=1).astype("int32")


def _model(seed: int) -> keras.Model:
    """20-64-64-3 ReLU MLP, Keras's default (Glorot-uniform) init."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(64, activation="relu", name="h1"),
            keras.layers.Dense(64, activation="relu", name=DEAD_LAYER),
            keras.layers.Dense(CLASSES, name="head"),
        ],
        name="mlp",
    )


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


def dead_relu_onset(
    steps: int = 300, onset: int = 150, every_n_steps: int = 1, seed: int = 0
) -> Outcome:
    """Trains the MLP whose layer "h2" dies at step `onset` (see the
    module's docstring); every alert of the gradient and activation
    monitors, the console lines, `fault_step` the onset.

    Raises:
        RuntimeError: On a Keras backend other than TensorFlow.
    """
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            "dead_relu_onset runs on the TensorFlow backend. Received: "
            f"keras.backend.backend()={keras.backend.backend()!r}"
        )
    return run(
        "dead-ReLU onset", _model(seed), _data(steps * BATCH, seed), steps,
        optimizer=keras.optimizers.Adam(1e-3), batch_size=BATCH,
        fault_step=onset, callbacks=[_KillAt(onset)],
        probe=_data(256, seed + 1)[0], probe_every=every_n_steps,
    )


#: The learning rate `collapse_after_bad_learning_rate` jumps to (SGD's
#: 0.01 before): one update sends "h2"'s pre-activations far below zero.
BAD_LEARNING_RATE = 50.0


class _LearningRateAt(keras.callbacks.Callback):
    """Sets SGD's learning rate to `rate` before the update of step `at`
    (batches counted here, across epochs)."""

    def __init__(self, at: int, rate: float) -> None:
        super().__init__()
        self.at, self.rate, self.batches = at, rate, 0

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self.batches == self.at:
            self.model.optimizer.learning_rate.assign(self.rate)
        self.batches += 1


def collapse_after_bad_learning_rate(
    steps: int = 300, onset: int = 150, every_n_steps: int = 1, seed: int = 0
) -> Outcome:
    """Trains the MLP with SGD(0.01) until step `onset`, whose update runs
    at `BAD_LEARNING_RATE`: from then on "h2" outputs 0 on every input, its
    std collapsed from about 0.28 to 0 (and every unit dead). Expected: no
    alert before the onset, the collapse (and dead units) on "h2" at the
    first activation summary after the update."""
    return run(
        "activation collapse", _model(seed), _data(steps * BATCH, seed), steps,
        optimizer=keras.optimizers.SGD(0.01), batch_size=BATCH,
        fault_step=onset, callbacks=[_LearningRateAt(onset, BAD_LEARNING_RATE)],
        probe=_data(256, seed + 1)[0], probe_every=every_n_steps,
    )
