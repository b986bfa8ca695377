"""tf_keras: an `Embedding`'s `tf.IndexedSlices` gradient passed into a
`tf.function` from outside (a custom loop) is measured as its dense tensor,
duplicate indices summed, and the update is the unwrapped one (issue 19)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import keras_gradmon
from keras_gradmon.columns import COLUMNS, STATISTICS
from tests.reference import reference_statistics

_IDS = np.array([[1, 1, 3, 0], [1, 3, 1, 7]], "int32")
_TARGETS = np.array([[0.5], [-1.0]], "float32")


def _custom_loop(optimizer) -> tuple[tf.keras.Model, list]:
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Embedding(12, 3, input_length=4),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(1),
        ]
    )
    model(_IDS)

    @tf.function
    def apply(grads):
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(_IDS) - _TARGETS) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        assert isinstance(grads[0], tf.IndexedSlices)
        apply(grads)
    return model, grads


@pytest.mark.parametrize("clipping", [None, {"method": "global_norm", "max_norm": 1e3}])
def test_indexed_slices_passed_into_function(clipping):
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        tf.keras.optimizers.Adam(0.05),
        every_n_steps=1,
        histogram_every_n_steps=1,
        skip_nonfinite=True,
        clipping=clipping,
    )
    model, grads = _custom_loop(optimizer)
    plain, _ = _custom_loop(tf.keras.optimizers.Adam(0.05))
    for got, want in zip(model.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(got, want)
    dense = tf.convert_to_tensor(grads[0]).numpy().astype(np.float64)
    got = dict(zip(COLUMNS, optimizer.snapshot().grad[0]))
    want = reference_statistics(dense)
    for name in STATISTICS:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=name)
