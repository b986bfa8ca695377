"""The Keras 3 adapter as a drop-in: what code inspecting or driving an
optimizer sees is the inner optimizer's (issue: weight-decay exclusion,
set_weights round trip, all-None gradients, read-only settings, EMA)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_gradmon import GradientMonitorOptimizer
from tests.helpers import LOSS, data, mlp


def _wrap(inner: keras.optimizers.Optimizer, **options) -> GradientMonitorOptimizer:
    return GradientMonitorOptimizer(inner, every_n_steps=1, **options)


def test_exclude_from_weight_decay_reaches_the_inner_optimizer():
    # Keras's adamw_test: excluded variables are not decayed.
    grads = tf.constant([0.0])
    var1 = keras.Variable([2.0], name="var1")
    var2, var3 = keras.Variable([2.0], name="exclude"), keras.Variable([2.0])
    by_name = _wrap(keras.optimizers.AdamW(learning_rate=1.0, weight_decay=0.004))
    by_name.exclude_from_weight_decay(var_names=["exclude"])
    by_name.apply_gradients(zip([grads, grads], [var1, var2]))
    by_list = _wrap(keras.optimizers.AdamW(learning_rate=1.0, weight_decay=0.004))
    by_list.exclude_from_weight_decay(var_list=[var3])
    by_list.apply_gradients(zip([grads, grads], [keras.Variable([2.0]), var3]))
    assert float(var1.numpy()[0]) == pytest.approx(1.992, abs=1e-6)  # decayed
    assert float(var2.numpy()[0]) == 2.0
    assert float(var3.numpy()[0]) == 2.0


def test_get_weights_and_set_weights_round_trip_the_inner_state():
    x, y = data(n=48)
    model = mlp()
    trained = _wrap(keras.optimizers.Adam(1e-2))
    model.compile(trained, LOSS)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    fresh = _wrap(keras.optimizers.Adam(1e-2))
    fresh.build(model.trainable_variables)
    fresh.set_weights([v.numpy() for v in trained.variables])
    assert len(fresh.variables) == len(trained.variables)
    for a, b in zip(fresh.variables, trained.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert int(fresh.iterations) == int(fresh.inner_optimizer.iterations) == 3


def test_set_weights_names_what_it_needs():
    optimizer = _wrap(keras.optimizers.SGD())
    with pytest.raises(ValueError, match="not yet been built"):
        optimizer.set_weights([])
    optimizer.build([keras.Variable(np.ones(3, "float32"))])
    with pytest.raises(ValueError, match="`weights` must hold"):
        optimizer.set_weights([np.zeros(3)])


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_all_none_gradients_raise_as_keras_does(mode):
    v = keras.Variable(np.ones(3, "float32"))
    optimizer = _wrap(keras.optimizers.Adam())

    def step():
        optimizer.apply([None], [v])

    run = step if mode == "eager" else tf.function(step)
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        run()


@pytest.mark.parametrize(
    "options",
    [
        {"clipnorm": 0.5},
        {"clipvalue": 0.25},
        {"global_clipnorm": 2.0},
        {"use_ema": True, "ema_momentum": 0.9},
        {"gradient_accumulation_steps": 4},
        {"weight_decay": 0.01},
    ],
)
def test_settings_read_through_and_refuse_assignment(options):
    optimizer = _wrap(keras.optimizers.SGD(**options))
    names = (
        "clipnorm",
        "clipvalue",
        "global_clipnorm",
        "use_ema",
        "ema_momentum",
        "gradient_accumulation_steps",
        "weight_decay",
    )
    for name in names:
        assert getattr(optimizer, name) == getattr(optimizer.inner_optimizer, name)
    for name, value in options.items():
        assert getattr(optimizer, name) == value
        with pytest.raises(AttributeError, match=f"`{name}` of .* is read-only"):
            setattr(optimizer, name, value * 2)


def test_hyper_parameters_read_through():
    optimizer = _wrap(keras.optimizers.Adam(beta_1=0.8, amsgrad=True))
    assert optimizer.beta_1 == 0.8 and optimizer.amsgrad is True
    with pytest.raises(AttributeError, match="no attribute 'not_a_setting'"):
        optimizer.not_a_setting  # noqa: B018


def test_ema_fit_matches_the_unwrapped_optimizer_and_builds_no_second_average():
    x, y = data(n=32)
    plain, monitored = mlp(), mlp()
    plain.compile(keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.9), LOSS)
    wrapped = _wrap(keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.9))
    monitored.compile(wrapped, LOSS)
    for model in (plain, monitored):
        model.fit(x, y, batch_size=8, epochs=2, verbose=0)  # ends on the EMA
    for a, b in zip(plain.get_weights(), monitored.get_weights()):
        np.testing.assert_array_equal(a, b)
    # The moving averages exist once, in the inner optimizer.
    averages = [v for v in wrapped.variables if "average" in v.path]
    assert len(averages) == len(monitored.trainable_variables)
    assert not hasattr(wrapped, "_model_variables_moving_average")


def test_gradient_accumulation_matches_the_unwrapped_optimizer():
    x, y = data(n=64)
    plain, monitored = mlp(), mlp()
    plain.compile(keras.optimizers.Adam(1e-2, gradient_accumulation_steps=2), LOSS)
    wrapped = _wrap(keras.optimizers.Adam(1e-2, gradient_accumulation_steps=2))
    monitored.compile(wrapped, LOSS)
    for model in (plain, monitored):
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    for a, b in zip(plain.get_weights(), monitored.get_weights()):
        np.testing.assert_array_equal(a, b)
    accumulators = [v for v in wrapped.variables if "accumulator" in v.path]
    assert len(accumulators) == len(monitored.trainable_variables)
