"""On the JAX backend, computing statistics never imports TensorFlow: checked
in fresh interpreters."""

from __future__ import annotations

import json

from tests.jax.test_stats import _subprocess

_COMPUTE = """
import jax, jax.numpy as jnp
from keras_gradmon import stats
tensors = [jnp.asarray([3e30, 4e30, float("nan")]), jnp.zeros([5, 3])]
jax.jit(stats.batched_statistics)(tensors).block_until_ready()
jax.jit(lambda ts: stats.batched_bucket_counts(ts, 5))(tensors)
jax.jit(stats.batched_global_norm)(tensors)
stats.bucket_counts(tensors[0], 3), stats.combine_norms(jnp.ones([2]))
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


def test_statistics_without_tensorflow_installed():
    # TensorFlow unavailable: nothing on the statistics' path needs it.
    report = "\nimport sys; print('tensorflow' in sys.modules)"
    out = _subprocess(["-c", _BLOCKED + _COMPUTE + report], "jax")
    assert out.split()[-1] == "False"


def test_statistics_do_not_import_tensorflow():
    # `import keras_gradmon` and the statistics on JAX: TensorFlow is
    # installed but never imported (if it were, the frames say who did).
    report = "\nprint(json.dumps([importers, 'tensorflow' in sys.modules]))"
    out = _subprocess(
        ["-c", _TRACED + "import keras, keras_gradmon\n" + _COMPUTE + report], "jax"
    )
    importers, imported = json.loads(out.splitlines()[-1])
    ours = [f.replace("\\", "/") for f in importers if "keras_gradmon" in f]
    assert not imported, ours or importers
