"""A custom training loop (no `model.fit`) with the monitor, global-norm
clipping from a config dict, alerts, and TensorBoard summaries.

Run: .venv/bin/python examples/custom_loop.py [--steps 300] [--logdir runs/custom]
then: tensorboard --logdir runs/custom
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import keras_gradmon

CONFIG = {
    "every_n_steps": 10,
    "histogram_every_n_steps": 50,
    "groups": {"body": "body_", "head": "head"},
    "skip_nonfinite": True,
    "clipping": {"method": "global_norm", "max_norm": 5.0},
}


def main(steps: int = 300, log_dir: str = "runs/custom") -> dict[str, float]:
    """Trains a small regressor; returns the last recorded totals."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2048, 16)).astype("float32")
    y = np.sin(x @ rng.normal(size=(16, 1))).astype("float32")
    model = keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(64, activation="relu", name="body_1"),
            keras.layers.Dense(64, activation="relu", name="body_2"),
            keras.layers.Dense(1, name="head"),
        ]
    )
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-2), config=CONFIG
    )
    writer = tf.summary.create_file_writer(log_dir)
    checker = keras_gradmon.AlertChecker(optimizer, log_dir=log_dir)
    loss_fn = keras.losses.MeanSquaredError()

    @tf.function(jit_compile=True)
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step in range(steps):
        batch = rng.integers(0, len(x), 64)
        loss = train_step(x[batch], y[batch])
        keras_gradmon.write_summaries(optimizer, writer)
        checker.check()
        if step % 100 == 0:
            print(f"step {step:4d}  loss {float(loss):.4f}")
    writer.flush()
    totals = optimizer.snapshot().totals
    print(
        f"global gradient norm {totals['grad_norm']:.4g} at step "
        f"{optimizer.snapshot().step}; alerts: {len(checker.history)}"
    )
    print(f"tensorboard --logdir {log_dir}")
    return totals


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--logdir", default="runs/custom")
    args = parser.parse_args()
    main(args.steps, args.logdir)
