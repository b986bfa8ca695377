"""Overhead of keras_gradmon under MirroredStrategy, against the same
distributed run unwrapped.

Two replicas on two logical CPU devices (the machine's one CPU split in two,
as the tests do), `model.fit` inside `strategy.scope()`, the models of
`bench_keras.py` (MLP 64-512-512-10 on 8192 samples, batch 128; the small
convnet on 2048 images, batch 64), global batch as given. XLA is off: Keras
cannot compile a MirroredStrategy step on CPU devices (the variables of one
replica live on the other's device), wrapped or not.

  A        plain `model.fit`, Adam(1e-3), under the strategy: the baseline.
  B        GradientMonitorOptimizer(every_n_steps=1, no histograms) +
           GradientMonitorCallback.                          Target <= 1.05x.
  B-no-cb  B without the callback (in-step cost only).
  B-econ   B with MonitorConfig.preset("economy"): gradient norms and
           non-finite counts only, no weight statistics.
  C        every_n_steps=100 + callback (the per-step conditional, and the
           all-reduce moved out of the inner optimizer).

All variants are built with the same seed and compiled by a warm-up epoch,
then each of `--reps` repetitions runs one epoch of every variant in turn.

    .venv/bin/python benchmarks/bench_distributed.py --markdown
    .venv/bin/python benchmarks/bench_distributed.py --quick   # smoke run
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

# Before anything initializes TensorFlow's devices.
_CPU = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _CPU, [tf.config.LogicalDeviceConfiguration()] * 2
)

import functools  # noqa: E402
import tempfile  # noqa: E402

import keras  # noqa: E402
from bench_keras import (  # noqa: E402
    bench_model,
    environment,
    parse_args,
    print_results,
)

from keras_gradmon import (  # noqa: E402
    GradientMonitorCallback,
    GradientMonitorOptimizer,
    MonitorConfig,
)

# name: (GradientMonitorOptimizer options or None, with GradientMonitorCallback)
VARIANTS = {
    "A": (None, False),
    "B": ({"every_n_steps": 1, "histogram_every_n_steps": None}, True),
    "B-no-cb": ({"every_n_steps": 1, "histogram_every_n_steps": None}, False),
    "B-econ": ({"config": MonitorConfig.preset("economy"), "every_n_steps": 1}, True),
    "C": ({"every_n_steps": 100, "histogram_every_n_steps": None}, True),
}
TARGETS = {"B": 1.05}


def epoch_runner(strategy, variant: str, spec, x, y, log_dir: str):
    """Builds and compiles the model of `variant`; returns a one-epoch callable."""
    options, with_callback = VARIANTS[variant]
    with strategy.scope():
        keras.utils.set_random_seed(0)
        optimizer = keras.optimizers.Adam(1e-3)
        if options is not None:
            optimizer = GradientMonitorOptimizer(optimizer, **options)
        model = spec.build()
        model.compile(
            optimizer,
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=False,
        )
    callback = GradientMonitorCallback(log_dir, alerts=False)
    callbacks = [callback] if with_callback else []

    def one_epoch() -> None:
        model.fit(x, y, batch_size=spec.batch, epochs=1, verbose=0, callbacks=callbacks)

    return one_epoch


def main() -> None:
    args, models, reps = parse_args(__doc__.splitlines()[0])
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    env = {**environment(), "replicas": strategy.num_replicas_in_sync}
    print(", ".join(f"{k} {v}" for k, v in env.items()), flush=True)
    make_unit = functools.partial(epoch_runner, strategy)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_distributed_") as root:
        for name in models:
            rows += bench_model(
                name, reps, args.steps, root, make_unit, VARIANTS, TARGETS
            )
    print_results(rows, env, reps, args)


if __name__ == "__main__":
    main()
