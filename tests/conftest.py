import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest
from hypothesis import settings

# CI runs the same examples every time (a failure there is reproducible);
# local runs keep exploring new ones.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(params=["eager", "function", "xla"])
def mode(request):
    """How a step function runs: eagerly, in tf.function, or XLA-compiled."""
    return request.param


def compile_fn(fn, mode):
    """`fn` as run in `mode` (see the `mode` fixture)."""
    import tensorflow as tf

    if mode == "eager":
        return fn
    return tf.function(fn, jit_compile=(mode == "xla"), autograph=False)
