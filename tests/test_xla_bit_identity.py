"""Under XLA the wrapped optimizer trains bit-identically to the unwrapped
one, BatchNorm included: the monitor reads exact copies of the gradients, so
XLA compiles the inner update as it would unwrapped (see
`keras_gradmon.backend.tensorflow.exact_copies` for why an extra
reader changes the update's rounding)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_gradmon import GradientMonitorOptimizer

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow

STEPS, BATCH = 3, 4  # Adam's first moment would differ after the 2nd update


def conv_bn_net():
    # Small, compiles in seconds, and shows the effect: BatchNorm gamma's
    # gradient ends in an elementwise multiply (... * rsqrt(var + eps)).
    L = keras.layers
    inputs = keras.Input((64, 64, 3))
    x = L.Rescaling(1 / 127.5, offset=-1)(inputs)
    for filters in (16, 32, 64):
        x = L.Conv2D(filters, 3, strides=2, padding="same", use_bias=False)(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU()(x)
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, L.Dense(5, activation="softmax")(x))


def mobilenet():
    # A real architecture (issue: MobileNetV3Small), MobileNet v1 at width
    # 0.25: 137 variables, depthwise convolutions and 27 BatchNorms, and
    # sensitive (an extra reader changes 166 of Adam's slots); its XLA
    # compiles cost a third of MobileNetV3Small's (107 s CPU the pair).
    return keras.applications.MobileNet(
        weights=None, input_shape=(64, 64, 3), classes=5, alpha=0.25
    )


class CapturingAdam(keras.optimizers.Adam):
    """Plain Adam plus one extra reader of each gradient (a variable copy):
    the canary that shows the check is sensitive on this XLA version."""

    def build(self, var_list):
        super().build(var_list)
        self.captured = [
            self.add_variable(
                v.shape, initializer="zeros", dtype=v.dtype, name="cap_" + v.name
            )
            for v in var_list
        ]

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
        for c, g in zip(self.captured, grads):
            c.assign(g)
        return super().apply(grads, trainable_variables)


def train(make_model, weights, optimizer, x, y):
    keras.utils.set_random_seed(0)
    model = make_model()
    model.set_weights(weights)
    model.compile(
        optimizer=optimizer, loss="sparse_categorical_crossentropy", jit_compile=True
    )
    assert model.jit_compile  # Keras turns XLA off on CPU-only machines otherwise
    for s in range(STEPS):
        b = slice(s * BATCH, (s + 1) * BATCH)
        model.train_on_batch(x[b], y[b])
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    slots = [v.numpy() for v in inner.variables if not v.name.startswith("cap_")]
    return [w.numpy() for w in model.weights], slots


def differing(a, b):
    return sum(not np.array_equal(u, v) for u, v in zip(a, b))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 255, (STEPS * BATCH, 64, 64, 3)).astype("float32")
    y = rng.integers(0, 5, STEPS * BATCH).astype("int32")
    return x, y


@pytest.fixture(scope="module")
def plain_runs(data):
    """`(initial weights, plain Adam's run)` of an architecture, trained once
    for the module: every test of the architecture compares with the same
    run (each run compiles the model with XLA afresh, seconds each)."""
    runs = {}

    def plain(make_model):
        if make_model not in runs:
            keras.utils.set_random_seed(0)
            weights = make_model().get_weights()
            run = train(make_model, weights, keras.optimizers.Adam(), *data)
            runs[make_model] = weights, run
        return runs[make_model]

    return plain


@pytest.mark.parametrize(
    "make_model, options",
    [
        (conv_bn_net, dict(every_n_steps=1, statistics=("norm",))),
        # A real architecture, every statistic and histograms.
        (mobilenet, dict(every_n_steps=2, histogram_every_n_steps=3)),
    ],
    ids=["conv_bn-norm", "mobilenet-all"],
)
def test_wrapped_is_bit_identical_under_xla(make_model, options, data, plain_runs):
    x, y = data
    weights, plain = plain_runs(make_model)
    wrapper = GradientMonitorOptimizer(keras.optimizers.Adam(), **options)
    wrapped = train(make_model, weights, wrapper, x, y)
    assert differing(plain[0], wrapped[0]) == 0
    assert differing(plain[1], wrapped[1]) == 0


@pytest.mark.parametrize("make_model", [conv_bn_net])
def test_the_check_is_sensitive(make_model, data, plain_runs):
    # An extra reader of the gradients changes Adam's first moment of
    # BatchNorm gammas (FMA contraction): if this ever stops happening, the
    # test above no longer proves anything on this XLA version.
    x, y = data
    weights, plain = plain_runs(make_model)
    captured = train(make_model, weights, CapturingAdam(), x, y)
    if differing(plain[1], captured[1]) == 0:
        pytest.skip("XLA no longer changes the update when gradients gain a reader")
