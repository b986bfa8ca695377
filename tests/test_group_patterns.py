"""The README's group pattern works on functional models built from
sub-models, Sequential models and subclassed models alike: a group's norm
is the L2 norm of exactly its variables' gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_gradmon import GradientMonitorOptimizer

#: The README's example.
GROUPS = {"encoder": r"(^|/)encoder_", "head": r"(^|/)head_"}


def _functional_of_submodels() -> keras.Model:
    inputs = keras.Input((6,))
    hidden = keras.layers.Dense(8, activation="relu", name="encoder_dense")(inputs)
    encoder = keras.Model(inputs, hidden, name="encoder")
    code = keras.Input((8,))
    head = keras.Model(code, keras.layers.Dense(2, name="head_dense")(code))
    x = keras.Input((6,))
    return keras.Model(x, head(encoder(x)))


def _sequential() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8, activation="relu", name="encoder_dense"),
            keras.layers.Dense(2, name="head_dense"),
        ]
    )


class _Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.encoder_dense = keras.layers.Dense(
            8, activation="relu", name="encoder_dense"
        )
        self.head_dense = keras.layers.Dense(2, name="head_dense")

    def call(self, x):
        return self.head_dense(self.encoder_dense(x))


def _subclassed() -> keras.Model:
    model = _Subclassed()
    model(np.zeros((1, 6), "float32"))
    return model


@pytest.mark.parametrize("build", [_functional_of_submodels, _sequential, _subclassed])
def test_group_norms_on_every_model_kind(build):
    keras.utils.set_random_seed(0)
    model = build()
    x = np.random.default_rng(0).normal(size=(16, 6)).astype("float32")
    y = np.random.default_rng(1).normal(size=(16, 2)).astype("float32")
    with tf.GradientTape() as tape:
        loss = keras.losses.MeanSquaredError()(y, model(x))
    variables = model.trainable_variables
    grads = tape.gradient(loss, variables)
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1), every_n_steps=1, groups=GROUPS
    )
    optimizer.apply_gradients(zip(grads, variables))
    snapshot = optimizer.monitor.snapshot()
    for i, name in enumerate(snapshot.groups):
        members = [g for g, v in zip(grads, variables) if name + "_" in v.path]
        assert len(members) == 2, [v.path for v in variables]
        expected = np.sqrt(sum(np.sum(np.float64(g) ** 2) for g in members))
        np.testing.assert_allclose(snapshot.group_grad_norm[i], expected, rtol=1e-6)


def test_a_group_matching_nothing_lists_the_paths():
    model = _functional_of_submodels()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1), groups={"encoder": "encoder/"}
    )
    grads = [tf.zeros_like(v) for v in model.trainable_variables]
    with pytest.raises(ValueError, match=r"encoder_dense/kernel"):
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
