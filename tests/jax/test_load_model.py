"""On JAX too, `import keras_gradmon` is enough for `keras.models.load_model`
of a model saved with a monitored optimizer, in a fresh interpreter,
whichever of the two is imported first, and TensorFlow stays unimported."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_gradmon import GradientMonitorOptimizer
from tests.jax.processes import run_python


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A model trained 2 steps with a monitor, saved as .keras."""
    directory = tmp_path_factory.mktemp("saved")
    rng = np.random.default_rng(0)
    x, y = rng.random((32, 4), np.float32), rng.random((32, 1), np.float32)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = GradientMonitorOptimizer(keras.optimizers.Adam(1e-2), every_n_steps=1)
    model.compile(optimizer, "mse")
    model.fit(x, y, batch_size=16, verbose=0)
    model.save(directory / "model.keras")
    np.save(directory / "x.npy", x)
    np.save(directory / "y.npy", y)
    return directory


@pytest.mark.parametrize("imports", ["keras_gradmon, keras", "keras, keras_gradmon"])
def test_load_model_after_import_and_continue_training(saved, imports):
    code = f"""
import sys
import {imports}
import numpy as np
d = {str(saved)!r}
model = keras.models.load_model(d + "/model.keras")
optimizer = model.optimizer
print(type(optimizer).__name__, int(optimizer.iterations))
model.fit(np.load(d + "/x.npy"), np.load(d + "/y.npy"), batch_size=16, verbose=0)
print("after", int(optimizer.iterations), optimizer.snapshot().step)
print("tensorflow imported", "tensorflow" in sys.modules)
"""
    out = run_python(["-c", code], "jax")
    assert "GradientMonitorOptimizer 2" in out
    assert "after 4 3" in out
    assert "tensorflow imported False" in out
