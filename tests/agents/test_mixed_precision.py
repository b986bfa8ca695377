"""The tf_keras wrapper and tf_keras loss scaling: refused, in both orders."""

from __future__ import annotations

import pytest
import tensorflow as tf

import keras_gradmon


def test_a_tf_keras_loss_scaler_inside_is_rejected():
    scaler = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
    with pytest.raises(ValueError, match=r"must not be a tf_keras LossScaleOptimizer"):
        keras_gradmon.GradientMonitorOptimizer(scaler)


def test_a_tf_keras_loss_scaler_outside_fails_when_writing(tmp_path):
    wrapper = keras_gradmon.GradientMonitorOptimizer(tf.keras.optimizers.Adam())
    scaler = tf.keras.mixed_precision.LossScaleOptimizer(wrapper)
    variable = tf.Variable([1.0, 2.0])
    scaler.apply_gradients([(tf.constant([0.5, 0.5]), variable)])
    with pytest.raises(ValueError, match=r"Put the loss scaler inside the monitor"):
        keras_gradmon.write_summaries(scaler, str(tmp_path))
