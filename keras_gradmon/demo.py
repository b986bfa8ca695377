"""The demo: the embedded model trained twice on built-in data, at a
learning rate that explodes, first with clipping switched off in its config,
then switched on. No downloads."""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import shlex
import shutil
import sys
import time

import numpy as np

from keras_gradmon.alerts.events import Alert
from keras_gradmon.recorders.console import progress_safe_logging

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
#: What the demo's alerts do: a critical alert stops training.
ACTIONS = {"critical": "stop"}
#: Training examples (of the 4096) and the batch size.
TRAIN_SAMPLES, BATCH_SIZE = 3584, 64


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What one demo run did.

    Attributes:
        losses: The loss of each epoch trained.
        steps: The optimizer steps taken.
        planned: The steps `fit` was asked for.
        stopped_by: The alert whose "stop" action ended training early, or
            None.
    """

    losses: list[float]
    steps: int
    planned: int
    stopped_by: Alert | None = None

    def stop_note(self) -> str | None:
        """The line saying that training stopped early, and why; None if it
        ran to the end.

        Example:

        >>> alert = Alert("nonfinite", "critical", 5, 291.0, 0.0, "head/kernel")
        >>> print(RunResult([float("inf")], 6, 280, alert).stop_note())
        training stopped early, after 6 of 280 steps: the "stop" action of critical alerts, on non-finite gradient at step 5 ('head/kernel'). Keras still draws the stopped epoch's progress bar in full.
        """  # noqa: E501
        alert = self.stopped_by
        if alert is None:
            return None
        return (
            f"training stopped early, after {self.steps} of {self.planned} "
            f'steps: the "stop" action of {alert.tier} alerts, on {alert.title} '
            f"at step {alert.step} ({alert.subject!r}). Keras still draws the "
            "stopped epoch's progress bar in full."
        )


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


def _callbacks(model, run_dir: str, probe: np.ndarray, clipping: bool) -> list:
    """Keras's TensorBoard callback (the loss, in `run_dir`), and
    `keras_gradmon.watch`'s: the gradient monitor, its alerts stopping
    training on a critical one, and the activations, in `run_dir/train`."""
    import keras

    import keras_gradmon

    config = run_config(clipping)
    watched = keras_gradmon.watch(
        model,
        os.path.join(run_dir, "train"),
        config=config,
        alerts={"actions": ACTIONS},
        activations={"data": probe, "every_n_steps": config["every_n_steps"]},
    )
    return [keras.callbacks.TensorBoard(run_dir), *watched]


def _stopped_by(model, callbacks: list) -> Alert | None:
    """The first alert whose tier's action is "stop", if `fit` stopped."""
    if not model.stop_training:
        return None
    alerts = sorted(
        (a for c in callbacks for a in getattr(c, "alerts", [])),
        key=lambda a: a.step,
    )
    return next((a for a in alerts if ACTIONS.get(a.tier) == "stop"), None)


def train_run(run_dir: str, clipping: bool, epochs: int, verbose: int = 1) -> RunResult:
    """Trains one run with every monitor on; returns what it did."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    keras.utils.set_random_seed(0)
    x, y = synthetic_data()
    x_train, y_train = x[:TRAIN_SAMPLES], y[:TRAIN_SAMPLES]
    probe = x[TRAIN_SAMPLES : TRAIN_SAMPLES + 256]
    model = build_model(x.shape[1])
    model.compile(
        optimizer=keras.optimizers.SGD(LEARNING_RATE), loss="mse", jit_compile=True
    )
    callbacks = _callbacks(model, run_dir, probe, clipping)
    with progress_safe_logging():  # alert lines below the progress bar
        history = model.fit(
            x_train,
            y_train,
            batch_size=BATCH_SIZE,
            epochs=epochs,
            verbose=verbose,
            callbacks=callbacks,
        )
    return RunResult(
        losses=[float(v) for v in history.history["loss"]],
        steps=int(model.optimizer.iterations),
        planned=epochs * math.ceil(TRAIN_SAMPLES / BATCH_SIZE),
        stopped_by=_stopped_by(model, callbacks),
    )


def tensorboard_command(log_dir: str) -> str:
    """A shell command that starts TensorBoard on `log_dir` with this
    Python's TensorBoard: `tensorboard` if that is the one on PATH, else
    the script beside the interpreter (a virtual environment not
    activated), else `python -m tensorboard.main`.

    Example:

    >>> tensorboard_command("runs/demo")  # doctest: +SKIP
    '.venv/bin/tensorboard --logdir runs/demo'
    """
    script = shutil.which("tensorboard", path=os.path.dirname(sys.executable))
    if script is None:
        command = [sys.executable, "-m", "tensorboard.main"]
    elif _same_file(shutil.which("tensorboard"), script):
        command = ["tensorboard"]
    else:
        relative = os.path.relpath(script)
        command = [script if relative.startswith(os.pardir) else relative]
    return shlex.join([*command, "--logdir", log_dir])


def _same_file(a: str | None, b: str) -> bool:
    return a is not None and os.path.exists(a) and os.path.samefile(a, b)


def run_demo(log_dir: str | None = None, epochs: int = 5, verbose: int = 1) -> str:
    """Trains both runs under `log_dir`; returns it."""
    log_dir = log_dir or os.path.join("runs", "demo", time.strftime("%Y%m%d-%H%M%S"))
    for name in RUNS:
        clipping = name == "clipping"
        print(
            f"\n--- run {name!r}: SGD({LEARNING_RATE}), clipping "
            f"{'on' if clipping else 'off'} (config clipping.enabled={clipping})"
        )
        result = train_run(os.path.join(log_dir, name), clipping, epochs, verbose)
        print(f"loss per epoch: {', '.join(f'{v:.4g}' for v in result.losses)}")
        if result.stop_note():
            print(result.stop_note())
    print(f"\nTensorBoard logs written to {os.path.abspath(log_dir)}")
    print(f"View them with:\n  {tensorboard_command(log_dir)}")
    print(
        "then open http://localhost:6006/#keras_gradmon for the per-layer "
        "dashboard (heatmap, alerts, health).\n"
    )
    return log_dir
