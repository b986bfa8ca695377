"""The update/weight ratio through the tf_keras and `tf.compat.v1.train`
adapters (what tf-agents' agents use): the ratio of what the inner
optimizer's update really moved, written with the in-graph summaries too."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import keras_gradmon
from tests.reference import load_events, scalar_series
from tests.update_reference import ratios

INNER = {
    "tf_keras_adam": lambda: tf_keras.optimizers.Adam(0.01),
    "tf_keras_legacy_sgd": lambda: tf_keras.optimizers.legacy.SGD(0.1, momentum=0.9),
    "v1_adam": lambda: tf.compat.v1.train.AdamOptimizer(0.01),
}


def _variables() -> list[tf.Variable]:
    return [
        tf.Variable([[1.0, -2.0], [0.5, 3.0]], name="dense/kernel"),
        tf.Variable([0.1, -0.2], name="dense/bias"),
    ]


@pytest.mark.parametrize("kind", sorted(INNER))
def test_ratio_of_the_applied_update(kind, tmp_path):
    variables = _variables()
    optimizer = keras_gradmon.wrap(
        INNER[kind](), every_n_steps=1, groups={"kernels": "kernel"}
    )
    writer = tf.summary.create_file_writer(str(tmp_path))
    rng = np.random.default_rng(0)

    @tf.function
    def train(grads):
        with writer.as_default():
            optimizer.apply_gradients(zip(grads, variables))

    expected = []
    for _ in range(3):
        before = [v.numpy() for v in variables]
        train([tf.constant(rng.normal(size=v.shape), tf.float32) for v in variables])
        expected.append(ratios(before, [v.numpy() for v in variables], {}))
    writer.flush()
    events = load_events(str(tmp_path))
    for subject, key in [("global", "global"), ("dense/kernel", 0), ("dense/bias", 1)]:
        series = scalar_series(events, f"update_ratio/{subject}")
        assert sorted(series) == [0, 1, 2]
        recorded = [series[s] for s in sorted(series)]
        np.testing.assert_allclose(recorded, [e[key] for e in expected], rtol=1e-5)
    assert sorted(scalar_series(events, "update_ratio/kernels")) == [0, 1, 2]
