"""Standard architectures from `keras.applications`, trained as a new user
would, judged by the default alert rules of every monitor; and the faults
the activation rules must still catch in them.

The setup (issue 30): the architecture at 32x32 (`weights=None`, 10
classes), a learnable task (labels from a fixed random teacher network over
normal images), `Adam(1e-3)`, batch 32, `GradientAlertCallback()` and
`ActivationMonitorCallback(x[:64], every_n_steps=10)` at their defaults.
Healthy: no alert is right. Faults, injected after the update that ends
step `onset - 1`: `dead_layer` pushes the offset of the BatchNormalization
feeding a ReLU layer to -100 (every unit of that ReLU outputs 0 from then
on); both must be caught at the first activation summary at or after the
onset.

Every run also keeps each activation summary (`Levels`): the per-layer
numbers `benchmarks/activation_levels.py` tabulates.

Example:

>>> outcome, levels = application("MobileNetV3Small", steps=40)  # doctest: +SKIP
>>> outcome.alerts  # doctest: +SKIP
[]
"""

from __future__ import annotations

import keras
import numpy as np

from keras_gradmon import (
    ActivationMonitorCallback,
    GradientAlertCallback,
    GradientMonitorOptimizer,
)
from keras_gradmon.activations.probe import ActivationSnapshot
from tests.scenarios.running import Outcome, console

SIZE, CLASSES, BATCH, PROBE = 32, 10, 32, 64
#: The architectures judged by default, and a few more that are checked.
ARCHITECTURES = ("MobileNetV3Small", "ResNet50V2")
MORE = ("MobileNetV2", "EfficientNetB0", "DenseNet121", "ConvNeXtTiny")
DEAD_OFFSET = -100.0
SPARSE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def build(name: str, seed: int = 0) -> keras.Model:
    """`keras.applications.<name>` at 32x32, random weights, 10 logits."""
    keras.utils.set_random_seed(seed)
    constructor = getattr(keras.applications, name)
    kwargs = {
        "input_shape": (SIZE, SIZE, 3),
        "weights": None,
        "classes": CLASSES,
        "classifier_activation": None,
    }
    if name.startswith(("MobileNetV3", "ConvNeXt")):
        kwargs["include_preprocessing"] = False
    return constructor(**kwargs)


def teacher_data(samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Normal images, and the class a fixed random teacher network (a ReLU
    convolution, global pooling, a linear map) gives each."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, SIZE, SIZE, 3)).astype("float32")
    teacher = np.random.default_rng(4321)
    kernel = teacher.normal(size=(3 * 3 * 3, 32)) / np.sqrt(27)
    head = teacher.normal(size=(32, CLASSES))
    patches = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(1, 2))
    patches = patches.reshape(samples, SIZE - 2, SIZE - 2, 27)
    features = np.maximum(patches @ kernel, 0.0)
    pooled = features.mean(axis=(1, 2))
    pooled = (pooled - pooled.mean(0)) / pooled.std(0)
    return x, (pooled @ head).argmax(axis=1).astype("int32")


class Levels(keras.callbacks.Callback):
    """Keeps every snapshot the activation callback `watcher` measured."""

    def __init__(self, watcher: ActivationMonitorCallback) -> None:
        super().__init__()
        self.watcher = watcher
        self.snapshots: list[ActivationSnapshot] = []

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        latest = self.watcher.monitor.latest
        if latest is not None and (
            not self.snapshots or self.snapshots[-1].step != latest.step
        ):
            self.snapshots.append(latest)


def relu_after_norm(model: keras.Model) -> tuple[str, keras.layers.Layer]:
    """The first ReLU layer fed by a BatchNormalization (its name, and the
    normalization, whose offset the `dead_layer` fault pushes down)."""
    for layer in model.layers:
        relu = isinstance(layer, keras.layers.ReLU) or (
            isinstance(layer, keras.layers.Activation)
            and getattr(layer.activation, "__name__", "") == "relu"
        )
        if not relu:
            continue
        source = layer.input._keras_history.operation
        if isinstance(source, keras.layers.BatchNormalization) and source.center:
            return layer.name, source
    raise ValueError(f"{model.name} has no ReLU fed by a BatchNormalization")


class _KillAt(keras.callbacks.Callback):
    """Sets the normalization's offset to `DEAD_OFFSET` after the update
    that brings the step count to `onset`."""

    def __init__(self, norm: keras.layers.Layer, onset: int) -> None:
        super().__init__()
        self.norm, self.onset = norm, onset

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if int(self.model.optimizer.iterations) == self.onset:
            beta = self.norm.beta
            beta.assign(np.full(beta.shape, DEAD_OFFSET, "float32"))


class _StopAt(keras.callbacks.Callback):
    """Ends `fit` after `steps` batches (counted here: on JAX the step
    counter is synced back to the optimizer at epoch end only)."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps, self.done = steps, 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.done += 1
        if self.done >= self.steps:
            self.model.stop_training = True


def application(
    name: str,
    steps: int = 300,
    *,
    every_n_steps: int = 10,
    fault: str | None = None,
    onset: int | None = None,
    seed: int = 0,
    samples: int = 2400,
) -> tuple[Outcome, Levels]:
    """Trains `keras.applications.<name>` as the module says: every alert
    of the gradient and activation callbacks at their defaults, the console
    lines, and every activation snapshot. `fault="dead_layer"` kills the
    first ReLU fed by a BatchNormalization at step `onset` (default: half
    way, on a summary step)."""
    model = build(name, seed)
    x, y = teacher_data(samples, seed)
    probe = teacher_data(PROBE, seed + 1)[0]
    model.compile(GradientMonitorOptimizer(keras.optimizers.Adam(1e-3)), SPARSE)
    activations = ActivationMonitorCallback(
        probe, every_n_steps=every_n_steps, histogram_buckets=None
    )
    gradients = GradientAlertCallback()
    levels = Levels(activations)
    callbacks: list = []
    fault_step = None
    if fault == "dead_layer":
        fault_step = onset if onset is not None else steps // 2
        callbacks.append(_KillAt(relu_after_norm(model)[1], fault_step))
    elif fault is not None:
        raise ValueError(f"Unknown fault. Received: fault={fault!r}")
    per_epoch = len(x) // BATCH
    with console(Outcome(name, steps, fault_step)) as outcome:
        model.fit(
            x, y, batch_size=BATCH, epochs=-(-steps // per_epoch), verbose=0,
            shuffle=False,
            callbacks=[*callbacks, gradients, activations, levels, _StopAt(steps)],
        )
        raised = [*gradients.alerts, *activations.alerts]
        outcome.alerts.extend(sorted(raised, key=lambda alert: alert.step))
    outcome.final_loss = float(model.history.history["loss"][-1])
    return outcome, levels


def level_summary(snapshots: list[ActivationSnapshot], window: int = 5) -> dict:
    """What the default activation rules see on a run, over its layers:
    the smallest and largest std and dead fraction, the largest fall of a
    layer's std below its best of the last `window` summaries (best / now)
    and the largest share of a layer's live units dying within them."""
    std: dict[str, list[float]] = {}
    dead: dict[str, list[float]] = {}
    for snapshot in snapshots:
        for layer, value in snapshot.stat("std").items():
            std.setdefault(layer, []).append(value)
        for layer, value in snapshot.stat("dead_fraction").items():
            dead.setdefault(layer, []).append(value)
    falls, deaths = [], []
    for layer, values in std.items():
        falls += [
            (max(values[max(0, i - window) : i]) / v, layer)
            for i, v in enumerate(values) if i and v > 0
        ]
    for layer, values in dead.items():
        alive = [1.0 - d for d in values]
        deaths += [
            (1.0 - a / best, layer)
            for i, a in enumerate(alive) if i
            if (best := max(alive[max(0, i - window) : i])) > 0
        ]
    every_std = [v for values in std.values() for v in values]
    every_dead = [(max(values), layer) for layer, values in dead.items()]
    return {
        "layers": len(std),
        "summaries": len(snapshots),
        "std_min": min(every_std, default=None),
        "std_max": max(every_std, default=None),
        "dead_max": max(every_dead, default=(None, None)),
        "std_fall_max": max(falls, default=(None, None)),
        "live_units_dying_max": max(deaths, default=(None, None)),
    }
