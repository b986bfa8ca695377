"""The JAX adapter outside `fit`: a hand-written `jax.jit` loop over
`stateless_apply` (skips, one compile, `use_state` and `write_summaries`),
a custom `train_step`, and a `LossScaleOptimizer` inside."""

from __future__ import annotations

import jax
import keras
import numpy as np
import pytest

import keras_gradmon
from keras_gradmon import GradientMonitorOptimizer
from tests.jax.models import compiled, conv_net, data, states_equal

_LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _loop(model, optimizer):
    """A jitted train step in the style of Keras's JAX guide."""

    def loss_of(trainable, non_trainable, x, y):
        logits, non_trainable = model.stateless_call(
            trainable, non_trainable, x, training=True
        )
        return _LOSS(y, logits), non_trainable

    grad_of = jax.value_and_grad(loss_of, has_aux=True)

    @jax.jit
    def step(state, x, y):
        trainable, non_trainable, opt_vars = state
        (_, non_trainable), grads = grad_of(trainable, non_trainable, x, y)
        trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
        return (trainable, non_trainable, opt_vars), grads

    return step


def _start(model, optimizer):
    optimizer.build(model.trainable_variables)
    return (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in optimizer.variables],
    )


def test_nan_step_is_skipped_bitwise_without_recompiling(tmp_path):
    model = conv_net()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3), every_n_steps=2, skip_nonfinite=True
    )
    step = _loop(model, optimizer)
    state = _start(model, optimizer)
    optimizer.use_state(lambda: state[2])
    x, y = data(8)
    for _ in range(3):
        state, _ = step(state, x, y)
    bad = x.copy()
    bad[0, 0, 0, 0] = np.nan
    after, grads = step(state, bad, y)
    assert not all(np.isfinite(np.asarray(g)).all() for g in grads)
    assert states_equal(after[0], state[0])
    inner = len(optimizer.inner_optimizer.variables)
    assert states_equal(after[2][:inner], state[2][:inner])
    state = after
    for _ in range(2):  # steps 3 (again: the skipped one is not counted) and 4
        state, _ = step(state, x, y)
    assert step._cache_size() == 1
    assert optimizer.read_iterations() == 5
    snapshot = optimizer.snapshot()
    assert (snapshot.step, snapshot.totals["skipped_steps"]) == (4, 1.0)
    assert keras_gradmon.write_summaries(optimizer, str(tmp_path))


def test_write_summaries_reads_the_loops_state(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )
    from tensorboard.util import tensor_util

    model = conv_net()
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.1), every_n_steps=1)
    step = _loop(model, optimizer)
    state = _start(model, optimizer)
    optimizer.use_state(lambda: state[2])
    x, y = data(8)
    norms = []
    for _ in range(5):
        state, grads = step(state, x, y)
        norms.append(float(np.sqrt(sum(np.sum(np.square(g)) for g in grads))))
        keras_gradmon.write_summaries(optimizer, str(tmp_path))
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0}).Reload()
    written = events.Tensors("grad_norm/global")
    assert [e.step for e in written] == [0, 1, 2, 3, 4]
    got = [float(tensor_util.make_ndarray(e.tensor_proto)) for e in written]
    np.testing.assert_allclose(got, norms, rtol=1e-5)


class _CustomStep(keras.Sequential):
    """A `train_step` of Keras's JAX guide, applying the optimizer itself,
    and reporting its own gradient norm."""

    def train_step(self, state, data):
        trainable, non_trainable, opt_vars, metrics = state
        x, y = data

        def loss_of(trainable, non_trainable):
            logits, non_trainable = self.stateless_call(
                trainable, non_trainable, x, training=True
            )
            return _LOSS(y, logits), non_trainable

        grad_of = jax.value_and_grad(loss_of, has_aux=True)
        (loss, non_trainable), grads = grad_of(trainable, non_trainable)
        trainable, opt_vars = self.optimizer.stateless_apply(opt_vars, grads, trainable)
        norm = keras.ops.sqrt(sum(keras.ops.sum(keras.ops.square(g)) for g in grads))
        logs = {"loss": loss, "own_norm": norm}
        return logs, (trainable, non_trainable, opt_vars, metrics)


def test_custom_train_step_records_its_gradients(tmp_path):
    reference = conv_net()
    model = _CustomStep(reference.layers)
    optimizer = GradientMonitorOptimizer(keras.optimizers.Adam(1e-3), every_n_steps=1)
    model.compile(optimizer=optimizer)
    seen = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs=None: seen.append(dict(logs))
    )
    x, y = data(48)
    callbacks = [keras_gradmon.GradientSummaryCallback(str(tmp_path)), record]
    model.fit(x, y, batch_size=8, verbose=0, shuffle=False, callbacks=callbacks)
    for logs in seen:
        assert logs["grad_norm"] == pytest.approx(logs["own_norm"], rel=1e-5)
    assert optimizer.snapshot().step == 5


def test_loss_scale_optimizer_inside_skips_and_records_its_scale():
    inner = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.Adam(1e-3), initial_scale=2.0**15
    )
    monitored = GradientMonitorOptimizer(inner, every_n_steps=1)
    plain = compiled(
        keras.optimizers.LossScaleOptimizer(
            keras.optimizers.Adam(1e-3), initial_scale=2.0**15
        )
    )
    wrapped = compiled(monitored)
    x, y = data(64)
    x[20] = np.nan  # batch 2: non-finite, the scaler skips it and halves
    for model in (plain, wrapped):
        model.fit(x, y, batch_size=8, verbose=0, shuffle=False)
    assert states_equal(plain.get_weights(), wrapped.get_weights())
    totals = monitored.snapshot().totals
    assert totals["skipped_steps"] == 1.0
    assert totals["loss_scale"] == 2.0**14


def test_stateless_apply_before_build_says_how_to_build():
    optimizer = GradientMonitorOptimizer(keras.optimizers.Adam(1e-3))
    with pytest.raises(ValueError, match=r"optimizer.build\(trainable_variables\)"):
        optimizer.stateless_apply([], [], [])
