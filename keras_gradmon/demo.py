"""The demo: train a small classifier on built-in synthetic data with the
monitor on, under XLA, and write TensorBoard logs. No downloads."""

from __future__ import annotations

import os
import time

import numpy as np


def synthetic_data(
    samples: int = 4096, features: int = 32, classes: int = 4, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian blobs: `samples` points in `features` dims, `classes` labels."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=2.0, size=(classes, features))
    labels = rng.integers(0, classes, samples)
    points = centers[labels] + rng.normal(size=(samples, features))
    return points.astype("float32"), labels.astype("int32")


def build_model(features: int = 32, classes: int = 4):
    """The demo's MLP, with named layers so that groups read well."""
    import keras

    return keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(128, activation="relu", name="hidden_1"),
            keras.layers.Dense(128, activation="relu", name="hidden_2"),
            keras.layers.Dense(classes, name="head"),
        ],
        name="demo_mlp",
    )


def run_demo(log_dir: str | None = None, epochs: int = 5) -> str:
    """Trains the demo model with monitoring on; returns the log directory."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    import keras_gradmon

    log_dir = log_dir or os.path.join("runs", "demo", time.strftime("%Y%m%d-%H%M%S"))
    keras.utils.set_random_seed(0)
    x, y = synthetic_data()
    model = build_model()
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3),
        every_n_steps=5,
        histogram_every_n_steps=20,
        groups={"hidden": "hidden_", "head": "head"},
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=True,
    )
    model.fit(
        x,
        y,
        batch_size=64,
        epochs=epochs,
        validation_split=0.1,
        verbose=2,
        callbacks=[
            keras_gradmon.GradientSummaryCallback(os.path.join(log_dir, "gradients")),
            keras.callbacks.TensorBoard(log_dir),
        ],
    )
    snapshot = optimizer.snapshot()
    print(f"\nLast recorded statistics (step {snapshot.step}):")
    print(f"  global gradient norm  {snapshot.totals['grad_norm']:.4g}")
    print(f"  global weight norm    {snapshot.totals['weight_norm']:.4g}")
    for group, norm in zip(snapshot.groups, snapshot.group_grad_norm):
        print(f"  group {group:<15} {float(norm):.4g}")
    print(f"\nTensorBoard logs written to {os.path.abspath(log_dir)}")
    print(f"View them with:\n  tensorboard --logdir {log_dir}")
    return log_dir
