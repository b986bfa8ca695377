"""Mixed precision: statistics of unscaled gradients in float32, the loss
scaler's skips counted as skipped, and the wrapping order enforced."""

import glob
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_gradmon
from keras_gradmon import GradientMonitorOptimizer
from keras_gradmon.columns import COLUMNS
from keras_gradmon.core.state import SKIPPED
from tests.conftest import compile_fn
from tests.helpers import LOSS, data, mlp
from tests.reference import (
    assert_statistics_close,
    load_events,
    reference_statistics,
    scalar_series,
)


@pytest.fixture
def policy(request):
    """Sets the global dtype policy for one test."""
    keras.mixed_precision.set_global_policy(request.param)
    yield request.param
    keras.mixed_precision.set_global_policy("float32")


def _unscaled_gradients(model, x, y, scale):
    """The gradients a loss scaler hands on: of `scale * loss`, divided back."""
    with tf.GradientTape() as tape:
        loss = LOSS(y, model(x, training=True)) * scale
    return [(g / scale).numpy() for g in tape.gradient(loss, model.trainable_variables)]


def _loop(model, optimizer, mode):
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = optimizer.scale_loss(LOSS(yb, model(xb, training=True)))
        optimizer.apply(tape.gradient(loss, model.trainable_variables))

    optimizer.build(model.trainable_variables)
    return compile_fn(step, mode)


@pytest.mark.parametrize("policy", ["mixed_float16"], indirect=True)
def test_statistics_are_of_the_unscaled_gradients(policy, mode):
    x, y = data(n=16)
    plain, monitored = mlp(), mlp()
    expected = _unscaled_gradients(mlp(), x, y, 1024.0)
    inner = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.1), initial_scale=1024.0
    )
    optimizer = GradientMonitorOptimizer(inner, every_n_steps=1)
    reference = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.1), initial_scale=1024.0
    )
    _loop(monitored, optimizer, mode)(x, y)
    _loop(plain, reference, mode)(x, y)
    snapshot = optimizer.snapshot()
    assert snapshot.step == 0
    assert monitored.trainable_variables[0].dtype == "float32"  # master weights
    for i, g in enumerate(expected):
        assert_statistics_close(
            dict(zip(COLUMNS, snapshot.grad[i])), reference_statistics(g), rtol=1e-5
        )
    flat = np.concatenate([g.ravel() for g in expected]).astype(np.float64)
    np.testing.assert_allclose(
        snapshot.totals["grad_norm"], np.linalg.norm(flat), rtol=1e-5
    )
    assert snapshot.totals["loss_scale"] == 1024.0
    assert snapshot.totals["skipped_steps"] == 0
    for a, b in zip(plain.get_weights(), monitored.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("policy", ["mixed_float16"], indirect=True)
def test_the_loss_scalers_skips_are_counted_not_reported_as_explosions(
    policy, tmp_path
):
    x, y = data(n=64)
    runs = {}
    for monitored in (True, False):
        model = mlp()
        # Far too large a first scale: the scaler skips steps and halves it.
        optimizer = keras.optimizers.LossScaleOptimizer(
            keras.optimizers.Adam(1e-2), initial_scale=2.0**23
        )
        callbacks = []
        if monitored:
            optimizer = GradientMonitorOptimizer(optimizer, every_n_steps=1)
            callbacks = [keras_gradmon.GradientSummaryCallback(str(tmp_path))]
        model.compile(optimizer=optimizer, loss=LOSS, auto_scale_loss=False)
        model.fit(
            x, y, batch_size=16, epochs=3, shuffle=False, verbose=0, callbacks=callbacks
        )
        runs[monitored] = (model.get_weights(), optimizer)
    optimizer = runs[True][1]
    skipped = int(optimizer.monitor.state.step_counts.numpy()[SKIPPED])
    iterations = int(optimizer.iterations.numpy())
    assert skipped > 0 and iterations > 0
    assert skipped + iterations == 12
    assert iterations == int(runs[False][1].iterations.numpy())
    for a, b in zip(*(runs[m][0] for m in (True, False))):
        np.testing.assert_array_equal(a, b)
    events = load_events(str(tmp_path))
    nonfinite = scalar_series(events, "grad_nonfinite/global")
    assert sorted(nonfinite) == list(range(iterations))  # applied steps only
    assert set(nonfinite.values()) == {0.0}
    assert scalar_series(events, "skipped/steps")[iterations - 1] == skipped
    totals = optimizer.snapshot().totals
    assert totals["loss_scale"] == 2.0**23 / 2**skipped
    assert totals["loss_scale"] == float(optimizer.inner_optimizer.dynamic_scale)
    scales = scalar_series(events, "loss_scale/scale")
    assert scales[iterations - 1] == totals["loss_scale"]
    assert max(scales.values()) <= 2.0**22  # the first applied step came after a skip


@pytest.mark.parametrize("policy", ["mixed_float16"], indirect=True)
def test_clipping_acts_on_the_unscaled_gradients(policy):
    x, y = data(n=16)
    plain, monitored = mlp(), mlp()
    expected = _unscaled_gradients(mlp(), x, y, 256.0)
    clipped, norm = tf.clip_by_global_norm([tf.constant(g) for g in expected], 0.05)
    keras.optimizers.SGD(0.1).apply(clipped, plain.trainable_variables)
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.LossScaleOptimizer(
            keras.optimizers.SGD(0.1), initial_scale=256.0
        ),
        every_n_steps=1,
        clipping={"method": "global_norm", "max_norm": 0.05},
    )
    _loop(monitored, optimizer, "function")(x, y)
    totals = optimizer.snapshot().totals
    np.testing.assert_allclose(totals["clip_pre_norm"], norm.numpy(), rtol=1e-6)
    assert totals["clip_post_norm"] == pytest.approx(0.05)
    for a, b in zip(plain.get_weights(), monitored.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_static_loss_scale_factor_is_divided_out():
    x, y = data(n=16)
    plain, monitored = mlp(), mlp()
    expected = _unscaled_gradients(mlp(), x, y, 1.0)
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1, loss_scale_factor=128.0), every_n_steps=1
    )
    assert optimizer.loss_scale_factor == 128.0
    _loop(monitored, optimizer, "function")(x, y)
    _loop(plain, keras.optimizers.SGD(0.1, loss_scale_factor=128.0), "function")(x, y)
    flat = np.concatenate([g.ravel() for g in expected]).astype(np.float64)
    np.testing.assert_allclose(
        optimizer.snapshot().totals["grad_norm"], np.linalg.norm(flat), rtol=1e-5
    )
    for a, b in zip(plain.get_weights(), monitored.get_weights()):
        np.testing.assert_array_equal(a, b)
    # Set on the monitor, it is the inner optimizer's (as MultiOptimizer).
    optimizer.loss_scale_factor = None
    assert optimizer.inner_optimizer.loss_scale_factor is None


@pytest.mark.parametrize("policy", ["mixed_bfloat16"], indirect=True)
def test_mixed_bfloat16(policy):
    x, y = data(n=32)
    plain, monitored = mlp(), mlp()
    expected = _unscaled_gradients(mlp(), x[:16], y[:16], 1.0)
    optimizer = GradientMonitorOptimizer(keras.optimizers.Adam(1e-2), every_n_steps=1)
    steps = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: steps.append(optimizer.snapshot())
    )
    plain.compile(keras.optimizers.Adam(1e-2), LOSS)
    monitored.compile(optimizer, LOSS)
    assert monitored.optimizer is optimizer  # no loss scaling for bfloat16
    plain.fit(x, y, batch_size=16, shuffle=False, verbose=0)
    monitored.fit(x, y, batch_size=16, shuffle=False, verbose=0, callbacks=[record])
    for i, g in enumerate(expected):
        assert_statistics_close(
            dict(zip(COLUMNS, steps[0].grad[i])), reference_statistics(g), rtol=1e-5
        )
    for a, b in zip(plain.get_weights(), monitored.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_float16_gradients_are_measured_in_float32():
    # 10^5 elements of 256: a norm of 80954, beyond float16 (65504).
    variable = keras.Variable(np.zeros(100_000), dtype="float16", name="w")
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.0), every_n_steps=1)
    optimizer.apply([tf.fill([100_000], tf.constant(256.0, tf.float16))], [variable])
    totals = optimizer.snapshot().totals
    np.testing.assert_allclose(totals["grad_norm"], 256.0 * np.sqrt(1e5), rtol=1e-6)
    assert totals["grad_nonfinite"] == 0


@pytest.mark.parametrize("policy", ["mixed_float16"], indirect=True)
def test_a_loss_scaler_around_the_monitor_fails_clearly(policy, tmp_path):
    x, y = data(n=16)
    model = mlp()
    model.compile(
        optimizer=GradientMonitorOptimizer(keras.optimizers.Adam()), loss=LOSS
    )
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    callback = keras_gradmon.GradientSummaryCallback(str(tmp_path))
    with pytest.raises(ValueError, match=r"Put the loss scaler inside the monitor"):
        model.fit(x, y, verbose=0, callbacks=[callback])
    with pytest.raises(ValueError, match=r"Received: optimizer=.*LossScaleOptimizer"):
        keras_gradmon.write_summaries(model.optimizer, str(tmp_path))
    assert not glob.glob(os.path.join(tmp_path, "events.out.tfevents.*"))


@pytest.mark.parametrize("policy", ["mixed_float16"], indirect=True)
def test_a_second_loss_scaler_fails_at_compile(policy):
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())
    )
    with pytest.raises(
        ValueError, match=r"auto_scale_loss=False.*Received: loss_scale_factor=None"
    ):
        mlp().compile(optimizer=optimizer, loss=LOSS)
    mlp().compile(optimizer=optimizer, loss=LOSS, auto_scale_loss=False)  # fine


def test_config_round_trip_with_a_loss_scaler():
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(), initial_scale=8.0),
        every_n_steps=3,
    )
    restored = GradientMonitorOptimizer.from_config(optimizer.get_config())
    assert isinstance(restored.inner_optimizer, keras.optimizers.LossScaleOptimizer)
    assert restored.inner_optimizer.initial_scale == 8.0
    assert restored.monitor_config == optimizer.monitor_config
    assert not restored.monitor_config.skip_nonfinite  # the user's config
    assert restored.monitor.loss_scaled  # the scaler's skips counted
