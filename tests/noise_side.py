"""The noise scale under a `MirroredStrategy` of 4 replicas on 4 logical
CPUs (a process of its own: logical devices are set before TensorFlow
starts); prints the noise totals as JSON. Run by
`tests/test_noise_scale_fit.py`."""

from __future__ import annotations

import json
import sys

import tensorflow as tf

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration() for _ in range(4)],
)

import keras  # noqa: E402

from keras_gradmon import GradientMonitorOptimizer  # noqa: E402
from tests.test_noise_scale_fit import PART_BATCH, PARTS, PROBLEM  # noqa: E402

OPTIONS = {
    "every_n_steps": 256,
    "histogram_every_n_steps": None,
    "noise_scale": {"batch_size": PART_BATCH, "decay": 0.98},
}


def _keras() -> tuple:
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.0), **OPTIONS)
    return PROBLEM.model(), optimizer


def _tf_keras() -> tuple:
    """The same model in tf_keras (what tf-agents uses), its optimizer
    wrapped by `keras_gradmon.wrap`."""
    import tf_keras

    import keras_gradmon

    model = tf_keras.Sequential(
        [tf_keras.Input((PROBLEM.dim,)), tf_keras.layers.Dense(1, use_bias=False)]
    )
    model.layers[0].kernel.assign(PROBLEM.weights[:, None].astype("float32"))
    return model, keras_gradmon.wrap(tf_keras.optimizers.SGD(0.0), **OPTIONS)


def main(kind: str) -> None:
    x, y = PROBLEM.dataset(PARTS * PART_BATCH * 1024)
    devices = [f"/cpu:{i}" for i in range(PARTS)]
    with tf.distribute.MirroredStrategy(devices).scope():
        model, optimizer = {"keras": _keras, "tf_keras": _tf_keras}[kind]()
        model.compile(optimizer, "mse")
    batch = PARTS * PART_BATCH
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    totals = optimizer.snapshot().totals
    print(json.dumps({k: float(v) for k, v in totals.items() if "noise" in k}))


if __name__ == "__main__":
    main(sys.argv[1])
