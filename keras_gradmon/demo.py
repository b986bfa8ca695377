"""The demo: the embedded model trained twice on built-in data, at a
learning rate that explodes, first with clipping switched off in its config,
then switched on. No downloads."""

from __future__ import annotations

import copy
import os
import time

import numpy as np

#: The demo's monitor configuration: the two runs differ only in
#: `clipping.enabled`.
CONFIG = {
    "every_n_steps": 5,
    "histogram_every_n_steps": 25,
    "groups": {"hidden": "hidden_", "head": "head"},
    "clipping": {"method": "global_norm", "max_norm": 1.0, "enabled": False},
}
#: Explodes within the first epoch without clipping; fine with it.
LEARNING_RATE = 0.1
RUNS = ("no_clipping", "clipping")


def synthetic_data(
    samples: int = 4096, features: int = 32, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A smooth nonlinear regression target of Gaussian inputs, plus noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, features))
    direction = rng.normal(size=(features, 1))
    y = 10 * np.tanh(x @ direction / 4) + 0.1 * rng.normal(size=(samples, 1))
    return x.astype("float32"), y.astype("float32")


def build_model(features: int = 32):
    """The demo's MLP, with named layers so that groups read well."""
    import keras

    def dense(units: int, name: str, activation: str | None = "relu"):
        return keras.layers.Dense(
            units, activation=activation, kernel_initializer="he_normal", name=name
        )

    return keras.Sequential(
        [
            keras.Input((features,)),
            dense(128, "hidden_1"),
            dense(128, "hidden_2"),
            dense(1, "head", activation=None),
        ],
        name="demo_mlp",
    )


def run_config(clipping: bool) -> dict:
    """The demo config with clipping switched on or off."""
    config = copy.deepcopy(CONFIG)
    config["clipping"]["enabled"] = clipping
    return config


def train_run(
    run_dir: str, clipping: bool, epochs: int, verbose: int = 1
) -> list[float]:
    """Trains one run with every monitor on; returns the loss per epoch."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    import keras_gradmon

    keras.utils.set_random_seed(0)
    x, y = synthetic_data()
    x_train, y_train, probe = x[:3584], y[:3584], x[3584:3840]
    model = build_model(x.shape[1])
    config = keras_gradmon.MonitorConfig.from_dict(run_config(clipping))
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.SGD(LEARNING_RATE), config=config
    )
    model.compile(optimizer=optimizer, loss="mse", jit_compile=True)
    train_dir = os.path.join(run_dir, "train")
    history = model.fit(
        x_train,
        y_train,
        batch_size=64,
        epochs=epochs,
        verbose=verbose,
        callbacks=[
            keras.callbacks.TensorBoard(run_dir),
            keras_gradmon.GradientSummaryCallback(train_dir),
            keras_gradmon.GradientAlertCallback(
                log_dir=train_dir, actions={"critical": "stop"}
            ),
            keras_gradmon.ActivationMonitorCallback(
                probe, log_dir=train_dir, every_n_steps=config.every_n_steps
            ),
        ],
    )
    return [float(v) for v in history.history["loss"]]


def run_demo(log_dir: str | None = None, epochs: int = 5, verbose: int = 1) -> str:
    """Trains both runs under `log_dir`; returns it."""
    log_dir = log_dir or os.path.join("runs", "demo", time.strftime("%Y%m%d-%H%M%S"))
    for name in RUNS:
        clipping = name == "clipping"
        print(
            f"\n--- run {name!r}: SGD({LEARNING_RATE}), clipping "
            f"{'on' if clipping else 'off'} (config clipping.enabled={clipping})"
        )
        losses = train_run(os.path.join(log_dir, name), clipping, epochs, verbose)
        print(f"loss per epoch: {', '.join(f'{v:.4g}' for v in losses)}")
    print(f"\nTensorBoard logs written to {os.path.abspath(log_dir)}")
    print(f"View them with:\n  tensorboard --logdir {log_dir}\n")
    return log_dir
