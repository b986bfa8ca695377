"""On the JAX backend, keras_gradmon never imports TensorFlow: computing
statistics, and a whole monitored `fit` with its callbacks and the report,
checked in fresh interpreters."""

from __future__ import annotations

import json

import pytest

from tests import prestart
from tests.jax.processes import start_python

_COMPUTE = """
import jax, jax.numpy as jnp
from keras_gradmon.core import batched, histogram
tensors = [jnp.asarray([3e30, 4e30, float("nan")]), jnp.zeros([5, 3])]
jax.jit(batched.batched_statistics)(tensors).block_until_ready()
jax.jit(lambda ts: batched.batched_bucket_counts(ts, 5))(tensors)
jax.jit(batched.batched_global_norm)(tensors)
histogram.bucket_counts(tensors[0], 3), batched.combine_norms(jnp.ones([2]))
"""

_BLOCKED = """
import importlib.abc, sys
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ImportError("tensorflow is blocked")
sys.meta_path.insert(0, Blocker())
"""

_TRACED = """
import importlib.abc, json, sys, traceback
importers = []
class Tracer(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            importers.extend(f.filename for f in traceback.extract_stack())
sys.meta_path.insert(0, Tracer())
"""


def test_statistics_without_tensorflow_installed(interpreters):
    # TensorFlow unavailable: nothing on the statistics' path needs it.
    out = interpreters["blocked_statistics"].finish()
    assert out.split()[-1] == "False"


def test_statistics_do_not_import_tensorflow(interpreters):
    # `import keras_gradmon` and the statistics on JAX: TensorFlow is
    # installed but never imported (if it were, the frames say who did).
    out = interpreters["traced_statistics"].finish()
    importers, imported = json.loads(out.splitlines()[-1])
    ours = [f.replace("\\", "/") for f in importers if "keras_gradmon" in f]
    assert not imported, ours or importers


_FIT = """
import sys, tempfile
import numpy as np, keras, keras_gradmon
from keras_gradmon.cli import main
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(1)])
optimizer = keras_gradmon.GradientMonitorOptimizer(
    keras.optimizers.Adam(), every_n_steps=2, histogram_every_n_steps=4,
    skip_nonfinite=True, clipping={"method": "zclip", "warmup": 2})
model.compile(optimizer, "mse")
logs = tempfile.mkdtemp()
callbacks = [keras_gradmon.GradientSummaryCallback(logs),
             keras_gradmon.GradientAlertCallback()]
model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, callbacks=callbacks)
sys.argv = ["keras-gradmon", "report", logs]
try:
    main()
except SystemExit as done:
    assert not done.code, done.code
print("summaries", optimizer.snapshot().step, "tensorflow" in sys.modules)
"""


def _start(folder: str) -> dict:
    """The fresh interpreters of this module's tests, started together."""
    imported = "\nimport sys; print('tensorflow' in sys.modules)"
    traced = "\nprint(json.dumps([importers, 'tensorflow' in sys.modules]))"
    importing = _TRACED + "import keras, keras_gradmon\n"
    codes = {
        "blocked_statistics": _BLOCKED + _COMPUTE + imported,
        "traced_statistics": importing + _COMPUTE + traced,
        "blocked_fit": _BLOCKED + _FIT,
    }
    return {name: start_python(["-c", code], "jax") for name, code in codes.items()}


prestart.register(__name__, _start)  # they run beside the tests before these


@pytest.fixture(scope="module")
def interpreters():
    started, _ = prestart.take(__name__, _start)
    yield started
    for running in started.values():  # those of deselected tests
        if running.process.poll() is None:
            running.process.kill()


def test_fit_callbacks_and_report_without_tensorflow_installed(interpreters):
    # The monitored fit, its callbacks, their event files and the report,
    # with TensorFlow unavailable.
    out = interpreters["blocked_fit"].finish()
    assert "global gradient norm" in out
    assert out.split()[-3:] == ["summaries", "14", "False"]
