"""`keras_gradmon.watch` on Keras 3's JAX backend: the optimizer wrapped in
place, training bit-identical to the unwrapped optimizer, and the global
norm written at the due steps."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import keras_gradmon
from keras_gradmon import GradientMonitorOptimizer
from tests.helpers import LOSS, data, mlp
from tests.jax.models import states_equal
from tests.reference import load_events, scalar_series


class _Steps(keras.callbacks.Callback):
    """Which batches `fit` ran."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(batch)


def _model() -> keras.Model:
    model = mlp(0)
    model.compile(keras.optimizers.Adam(1e-2), LOSS)
    return model


def _fit(model: keras.Model, callbacks) -> None:
    x, y = data(n=64)
    model.fit(
        x, y, batch_size=16, epochs=2, shuffle=False, verbose=0,
        callbacks=callbacks,
    )


def _step0_norm(model: keras.Model) -> float:
    """The float64 norm of the gradient of the first batch, by JAX."""
    import jax

    x, y = data(n=64)
    x, y = x[:16], y[:16]
    weights = [np.asarray(w) for w in model.get_weights()]

    def loss(kernel0, bias0, kernel1, bias1):
        hidden = jax.nn.relu(x @ kernel0 + bias0)
        logits = hidden @ kernel1 + bias1
        picked = jax.numpy.take_along_axis(
            jax.nn.log_softmax(logits), y[:, None], axis=1
        )
        return -picked.mean()

    grads = jax.grad(loss, argnums=(0, 1, 2, 3))(*weights)
    flat = np.concatenate([np.asarray(g, np.float64).ravel() for g in grads])
    return float(np.linalg.norm(flat))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    plain = _model()
    _fit(plain, [])
    model = _model()
    inner = model.optimizer
    expected = _step0_norm(model)
    log_dir = str(tmp_path_factory.mktemp("jax_watch"))
    watched = keras_gradmon.watch(model, log_dir, every_n_steps=2)
    steps = _Steps()
    _fit(model, [watched, steps])
    return plain, model, inner, watched, steps, expected, load_events(log_dir)


def test_wrapped_in_place_and_bit_identical(runs):
    plain, model, inner, watched, steps, _, _ = runs
    assert isinstance(model.optimizer, GradientMonitorOptimizer)
    assert watched.optimizers == [model.optimizer]
    assert model.optimizer.inner_optimizer is inner
    assert steps.seen == [0, 1, 2, 3] * 2
    assert states_equal(plain.get_weights(), model.get_weights())
    assert states_equal(
        [np.asarray(v) for v in plain.optimizer.variables],
        [np.asarray(v) for v in inner.variables],
    )
    assert int(np.asarray(model.optimizer.iterations)) == 8


def test_the_global_norm_is_written_at_the_due_steps(runs):
    _, model, _, _, _, expected, events = runs
    norms = scalar_series(events, "grad_norm/global")
    assert norms.keys() == {0, 2, 4, 6}
    assert norms[0] == pytest.approx(expected, rel=1e-5)
    snapshot = model.optimizer.snapshot()
    assert snapshot.step == 6
    assert norms[6] == pytest.approx(snapshot.totals["grad_norm"], rel=1e-6)
    assert scalar_series(events, "alerts/nonfinite") == dict.fromkeys(norms, 0.0)
