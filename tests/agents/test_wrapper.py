"""The tf_keras wrapper outside an agent: inner optimizer kinds, skipping, XLA."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import keras_gradmon
from tests.reference import load_events, scalar_series


def _variables():
    return [tf.Variable([1.0, 2.0], name="w"), tf.Variable([0.5], name="b")]


def test_wraps_a_legacy_optimizer():
    variables = _variables()
    inner = tf.keras.optimizers.legacy.SGD(0.1)
    optimizer = keras_gradmon.GradientMonitorOptimizer(inner, every_n_steps=1)
    optimizer.apply_gradients(zip([tf.constant([3.0, 4.0]), None], variables))
    np.testing.assert_allclose(variables[0].numpy(), [0.7, 1.6])
    snapshot = optimizer.snapshot()
    assert snapshot.step == 0
    assert snapshot.totals["grad_norm"] == pytest.approx(5.0)
    assert snapshot.totals["grad_missing"] == 1.0
    assert int(optimizer.iterations) == 1


def test_skip_nonfinite_keeps_weights():
    variables = _variables()
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        tf.keras.optimizers.Adam(0.1), every_n_steps=1, skip_nonfinite=True
    )

    @tf.function
    def step(grads):
        optimizer.apply_gradients(zip(grads, variables))

    step([tf.constant([np.nan, 1.0]), tf.constant([1.0])])
    np.testing.assert_array_equal(variables[0].numpy(), [1.0, 2.0])
    assert optimizer.snapshot().totals["skipped_steps"] == 1.0
    step([tf.constant([1.0, 1.0]), tf.constant([1.0])])
    assert variables[0].numpy()[0] != 1.0


def test_xla_records_without_summaries(tmp_path):
    variables = _variables()
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        tf.keras.optimizers.Adam(0.1), every_n_steps=1
    )

    @tf.function(jit_compile=True)
    def step():
        optimizer.apply_gradients(
            zip([tf.constant([3.0, 4.0]), tf.constant([0.0])], variables)
        )

    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        step()  # no summary op inside XLA: statistics only
        optimizer.apply_gradients(  # eagerly: written
            zip([tf.constant([3.0, 4.0]), tf.constant([0.0])], variables)
        )
    writer.flush()
    assert optimizer.snapshot().totals["grad_norm"] == pytest.approx(5.0)
    norms = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    assert norms == {1: pytest.approx(5.0)}


def test_other_variables_are_rejected():
    optimizer = keras_gradmon.GradientMonitorOptimizer(tf.keras.optimizers.Adam())
    optimizer.apply_gradients([(tf.constant([1.0, 1.0]), _variables()[0])])
    with pytest.raises(ValueError, match="another one"):
        optimizer.apply_gradients([(tf.constant([1.0]), tf.Variable([1.0]))])
