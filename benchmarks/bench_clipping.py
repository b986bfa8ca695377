"""Cost of keras_gradmon's clipping against Keras's own `global_clipnorm`.

Same MLP as `bench_keras.py` (64-512-512-10, batch 128, 256 steps an
epoch), `jit_compile=True`, one epoch per unit, 9 interleaved repetitions:

  A          Adam(1e-3, global_clipnorm=1.0): Keras clips by global norm.
  clip       GradientMonitorOptimizer(Adam(1e-3), clipping global_norm 1.0,
             statistics every 100 steps, no histograms, no callback).
                                                          Target <= 1.02x.
  clip+skip  the same with skip_nonfinite=True (a conditional around the
             update, as LossScaleOptimizer has).
  autoclip   clipping {"method": "autoclip"} (percentile of the norm history).

Run from the repository root on an otherwise idle machine:

    .venv/bin/python benchmarks/bench_clipping.py --markdown
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse

import keras
import numpy as np
from _timing import format_table, interleaved_times, summarize

from keras_gradmon import GradientMonitorOptimizer

MONITOR = {"every_n_steps": 100, "histogram_every_n_steps": None}
VARIANTS = {
    "A": None,
    "clip": {**MONITOR, "clipping": {"method": "global_norm", "max_norm": 1.0}},
    "clip+skip": {
        **MONITOR,
        "clipping": {"method": "global_norm", "max_norm": 1.0},
        "skip_nonfinite": True,
    },
    "autoclip": {**MONITOR, "clipping": {"method": "autoclip"}},
}
TARGETS = {"clip": 1.02}


def epoch_runner(options, x, y):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    if options is None:
        optimizer = keras.optimizers.Adam(1e-3, global_clipnorm=1.0)
    else:
        optimizer = GradientMonitorOptimizer(keras.optimizers.Adam(1e-3), **options)
    model.compile(
        optimizer,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    return lambda: model.fit(x, y, batch_size=128, epochs=1, verbose=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256 * 128, 64)).astype("float32")
    y = rng.integers(0, 10, 256 * 128)
    units = {name: epoch_runner(options, x, y) for name, options in VARIANTS.items()}
    for unit in units.values():
        unit()  # compile
    rows = summarize(interleaved_times(units, args.reps), "A", TARGETS)
    rows = [{"model": "mlp", **row} for row in rows]
    print(format_table(rows))
    if args.markdown:
        print()
        print(format_table(rows, markdown=True))


if __name__ == "__main__":
    main()
