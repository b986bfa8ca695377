"""Section 3 of issue 23 on real Keras models (TensorFlow backend): a ReLU
layer that dies is reported at the next activation summary, and healthy
models raise no activation alert at the default rules."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from benchmarks._activation_scenarios import dead_relu_onset
from keras_gradmon import ActivationMonitorCallback


@pytest.mark.parametrize(
    ("every_n_steps", "onset", "first"),
    [
        (1, 40, [40, 41]),
        # The first summaries at or after step 40 are steps 42 and 49.
        (7, 40, [42, 49]),
    ],
)
def test_a_dead_relu_layer_alerts_at_the_next_summary(every_n_steps, onset, first):
    run = dead_relu_onset(steps=60, onset=onset, every_n_steps=every_n_steps)
    assert run["onset"] == onset
    before = [alert for alert in run["alerts"] if alert[0] < onset]
    assert before == []
    dead = [
        (alert, subject)
        for alert, subject in zip(run["alerts"], run["subjects"])
        if alert[1] == "dead_units"
    ]
    # Warning at the first summary (100% dead), critical from the second
    # (more than 90% for 2 summaries), on the layer that died only.
    assert dead[:2] == [
        ((first[0], "dead_units", "warning"), "h2"),
        ((first[1], "dead_units", "critical"), "h2"),
    ]
    assert {subject for _, subject in dead} == {"h2"}
    assert run["lines"][0].startswith(
        f"WARNING activation_dead_fraction threshold at step {first[0]}: "
        "activation_dead_fraction of 'h2' = 1 > 0.25"
    )


def _bn_cnn() -> keras.Model:
    keras.utils.set_random_seed(0)
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input((12, 12, 1)),
            layers.Conv2D(8, 3, padding="same", use_bias=False, name="c1"),
            layers.BatchNormalization(name="bn1"),
            layers.ReLU(name="r1"),
            layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False),
            layers.BatchNormalization(name="bn2"),
            layers.ReLU(name="r2"),
            layers.GlobalAveragePooling2D(),
            layers.Dense(3, name="head"),
        ]
    )


def _images(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixels in [0, 1]; class c brightens rows 4c to 4c+3."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, samples)
    x = rng.uniform(0.0, 0.5, size=(samples, 12, 12, 1)).astype("float32")
    for c in range(3):
        x[y == c, 4 * c : 4 * c + 4] += 0.5
    return x, y


def test_a_healthy_batchnorm_cnn_raises_no_activation_alert():
    steps = 200
    model = _bn_cnn()
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    x, y = _images(steps * 16, seed=1)
    callback = ActivationMonitorCallback(
        _images(128, seed=2)[0], every_n_steps=1, histogram_buckets=None
    )
    history = model.fit(x, y, batch_size=16, verbose=0, callbacks=[callback])
    assert history.history["accuracy"][-1] > 0.9  # it learns: healthy
    assert callback.monitor.latest.step == steps - 1
    assert callback.monitor.layer_names == ["r1", "r2"]
    assert callback.alerts == []
