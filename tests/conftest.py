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


def pytest_collection_finish(session):
    """Starts the processes the collected modules wait for (`tests.prestart`),
    and takes what collecting imported out of the garbage collector's view:
    each full collection otherwise walks TensorFlow's, Keras's and JAX's
    modules again (1.2-1.9 s each, about 25 a worker in the TensorFlow
    suite; 0.2 s each frozen)."""
    import gc

    from tests import prestart

    modules = (getattr(item, "module", None) for item in session.items)
    prestart.start(module.__name__ for module in modules if module is not None)
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session):
    from tests import prestart

    prestart.stop()


def pytest_collection_modifyitems(config, items):
    """The files marked slow run first. Under xdist each worker takes whole
    files (`--dist loadfile`), in collection order: a long file collected
    last would keep one core busy minutes after the other ran out of work."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
