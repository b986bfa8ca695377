import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_gradmon
from keras_gradmon import ActivationMonitorCallback
from tests.activations import models
from tests.reference import load_events, scalar_series

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _data(n=96):
    x = models.probe_data(n, seed=3)
    return x, (x[:, 0] > 0).astype("int32")


def _fit(model, callbacks, epochs=2, jit_compile=False, **compile_options):
    """Fits `model` on `_data`. Without XLA unless asked: the probe is a
    `tf.function` of its own, the same either way, and a graph compiles in
    half the time; the test of the default (XLA) is the first one."""
    x, y = _data()
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1), every_n_steps=2
    )
    model.compile(optimizer, LOSS, jit_compile=jit_compile, **compile_options)
    return model.fit(
        x, y, batch_size=16, epochs=epochs, shuffle=False, verbose=0,
        callbacks=callbacks,
    )


def test_steps_align_with_gradient_summaries_and_describe_that_steps_weights(
    tmp_path,
):
    model = models.sequential()
    probe = models.probe_data()
    before = models.reference_activations(model, probe)
    log_dir = str(tmp_path)
    _fit(
        model,
        [
            keras_gradmon.GradientSummaryCallback(log_dir),
            ActivationMonitorCallback(probe, log_dir=log_dir, every_n_steps=2),
        ],
        jit_compile=True,  # the default a user gets
    )
    events = load_events(log_dir)
    grad_steps = scalar_series(events, "grad_norm/global").keys()
    std = scalar_series(events, "activation_std/seq/h2")
    assert std.keys() == grad_steps == set(range(0, 12, 2))
    # Step 0 is measured before the first update: the initial weights.
    assert std[0] == pytest.approx(before["seq/h2"].astype(np.float64).std(), rel=1e-5)
    after = models.reference_activations(model, probe)["seq/h2"].std()
    assert std[10] != pytest.approx(std[0], rel=1e-3)
    assert std[10] != pytest.approx(after, rel=1e-6)  # before step 10's update
    dead = scalar_series(events, "activation_dead_fraction/seq/h1")
    assert set(dead.values()) == {len(models.DEAD) / 8}


def test_probing_does_not_change_training():
    def build():
        keras.utils.set_random_seed(4)
        return keras.Sequential(
            [
                keras.Input((models.FEATURES,)),
                keras.layers.Dense(16, activation="relu", name="h1"),
                keras.layers.BatchNormalization(name="bn"),
                keras.layers.Dropout(0.3, name="drop"),
                keras.layers.Dense(8, activation="tanh", name="h2"),
                keras.layers.Dense(2, name="head"),
            ]
        )

    plain, watched = build(), build()
    keras.utils.set_random_seed(5)
    _fit(plain, [])
    keras.utils.set_random_seed(5)
    callback = ActivationMonitorCallback(models.probe_data(), every_n_steps=1)
    _fit(watched, [callback])
    assert callback.monitor.latest.step == 11
    for a, b in zip(plain.get_weights(), watched.get_weights()):
        np.testing.assert_array_equal(a, b)  # BN moving stats included


def test_steps_per_execution_measures_each_due_step_once(tmp_path):
    callback = ActivationMonitorCallback(
        models.probe_data(32), log_dir=str(tmp_path), every_n_steps=2
    )
    _fit(models.sequential(), [callback], epochs=1, steps_per_execution=3)
    events = load_events(str(tmp_path))
    # Executions start at steps 0, 3: due steps 0 and 2 are measured there.
    assert scalar_series(events, "activation_mean/seq/h1").keys() == {0, 3}


def test_stop_action_ends_fit_on_dead_units():
    callback = ActivationMonitorCallback(
        models.probe_data(),
        every_n_steps=1,
        dead_fraction=0.25,
        actions={"warning": "stop"},
    )
    history = _fit(models.sequential(), [callback], epochs=3)
    assert len(history.epoch) == 1  # stopped in the first epoch
    assert callback.alerts[0].subject == "seq/h1"


def test_unknown_layer_is_an_error_at_construction_or_fit_start():
    model = models.sequential()
    message = r"\['missing'\].*'seq/h1', 'seq/h2', 'seq/h3', 'seq/head'"
    with pytest.raises(ValueError, match=message):
        ActivationMonitorCallback(models.probe_data(4), layers=["missing"], model=model)
    callback = ActivationMonitorCallback(models.probe_data(4), layers=["missing"])
    with pytest.raises(ValueError, match=r"\['missing'\]"):
        _fit(model, [callback], epochs=1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"data": None}, "Received: data=None"),
        ({"every_n_steps": 0}, "Received: every_n_steps=0"),
        ({"histogram_buckets": -1}, "Received: histogram_buckets=-1"),
        ({"dead_fraction": 2.0}, "Received: dead_fraction=2.0"),
        ({"actions": {"fatal": "stop"}}, "unknown tier 'fatal'"),
        ({"log_dir": "a", "writer": tf.summary.create_noop_writer()}, "at most one"),
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, message):
    options = {"data": models.probe_data(4), **kwargs}
    with pytest.raises(ValueError, match=message):
        ActivationMonitorCallback(**options)

