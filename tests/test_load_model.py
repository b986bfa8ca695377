"""`import keras_gradmon` is enough for `keras.models.load_model`, in a
fresh interpreter, whichever of the two is imported first."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from keras_gradmon import GradientMonitorOptimizer
from tests.helpers import LOSS, data, mlp

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str, **env: str) -> str:
    """Runs `code` in a fresh interpreter; returns its standard output."""
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env}
    environment["PYTHONPATH"] = ROOT
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A model trained 2 steps with a clipping monitor, saved as .keras."""
    directory = tmp_path_factory.mktemp("saved")
    x, y = data(n=32)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-2),
        every_n_steps=1,
        clipping={"method": "autoclip", "history": 4},
    )
    model.compile(optimizer, LOSS)
    model.fit(x, y, batch_size=16, verbose=0)
    path = str(directory / "model.keras")
    model.save(path)
    np.save(directory / "x.npy", x)
    np.save(directory / "y.npy", y)
    return directory


@pytest.mark.parametrize("order", ["gradmon_first", "keras_first"])
def test_load_model_after_import_and_continue_training(saved, order):
    imports = (
        "keras_gradmon, keras" if order == "gradmon_first" else "keras, keras_gradmon"
    )
    out = _run(
        f"""
        import {imports}
        import numpy as np
        d = {str(saved)!r}
        model = keras.models.load_model(d + "/model.keras")
        optimizer = model.optimizer
        assert type(optimizer).__name__ == "GradientMonitorOptimizer", optimizer
        print("iterations", int(optimizer.iterations))
        print("clip_count", int(optimizer.monitor.state.clip["count"].numpy()))
        x, y = np.load(d + "/x.npy"), np.load(d + "/y.npy")
        model.fit(x, y, batch_size=16, verbose=0)
        print("after", int(optimizer.iterations), optimizer.snapshot().step)
        """
    )
    assert "iterations 2" in out
    assert "clip_count 2" in out  # the autoclip history came back too
    assert "after 4 3" in out


def test_tf_keras_load_model_after_import(tmp_path):
    out = _run(
        f"""
        import keras_gradmon
        import numpy as np
        import tensorflow as tf
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
        optimizer = keras_gradmon.wrap(tf.keras.optimizers.Adam(1e-2), every_n_steps=1)
        model.compile(optimizer, "mse")
        x, y = np.ones((8, 4), "float32"), np.zeros((8, 2), "float32")
        model.fit(x, y, verbose=0)
        model.save({str(tmp_path / "tf_keras.h5")!r})
        print("saved")
        """,
        TF_USE_LEGACY_KERAS="1",
    )
    assert "saved" in out
    out = _run(
        f"""
        import keras_gradmon
        import numpy as np
        import tensorflow as tf
        model = tf.keras.models.load_model({str(tmp_path / "tf_keras.h5")!r})
        print(type(model.optimizer).__name__)
        x, y = np.ones((8, 4), "float32"), np.zeros((8, 2), "float32")
        model.fit(x, y, verbose=0)
        print("step", model.optimizer.snapshot().step)
        """,
        TF_USE_LEGACY_KERAS="1",
    )
    assert "TfKerasGradientMonitorOptimizer" in out
    assert "step" in out


def test_the_command_line_starts_without_tensorflow():
    out = _run(
        """
        import sys
        import keras_gradmon.cli
        import keras_gradmon
        heavy = ("tensorflow", "keras", "tf_keras")
        print(sorted(m for m in heavy if m in sys.modules))
        """
    )
    assert out.strip() == "[]"
