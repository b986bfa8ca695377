"""The host's CPU time per summary when every step is a summary (issue 31):
the writer thread's (`MonitorWriter._process`: unpacking a captured row,
tagging about 100 numbers, serializing the event) and the training
thread's capture (`MonitorWriter.capture`), in thread CPU time.

MLP 64-512-512-10, batch 128, `every_n_steps=1`, no histograms, with
`GradientMonitorCallback` (`--read-every`: its `read_every`, 8 by default);
one epoch of 256 steps after a first one. Also the callback's batch hooks'
thread CPU, per step (on JAX the end hook runs on Keras's worker thread).

    .venv/bin/python benchmarks/writer_cpu.py
    KERAS_BACKEND=jax .venv/bin/python benchmarks/writer_cpu.py --read-every 1
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time

import keras
import numpy as np

import keras_gradmon
from keras_gradmon.writer import MonitorWriter

SPENT: dict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter = collections.Counter()


def timed(name: str, owner: type = MonitorWriter) -> None:
    """Wraps `owner.<name>` to add up its thread CPU time."""
    original = getattr(owner, name)

    def run(self, *args, **kwargs):
        start = time.thread_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            SPENT[name] += time.thread_time() - start
            CALLS[name] += 1

    setattr(owner, name, run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read-every", type=int, default=8)
    args = parser.parse_args()
    timed("_process")
    timed("capture")
    hooks = ("on_train_batch_begin", "on_train_batch_end")
    for hook in hooks:
        timed(hook, keras_gradmon.GradientMonitorCallback)
    rng = np.random.default_rng(0)
    x = rng.random((128 * 256, 64), np.float32)
    y = rng.integers(0, 10, 128 * 256)
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(512, activation="relu"),
         keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)]
    )  # fmt: skip
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3), every_n_steps=1, histogram_every_n_steps=None
    )
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=True)
    callback = keras_gradmon.GradientMonitorCallback(
        tempfile.mkdtemp(), alerts=False, read_every=args.read_every
    )
    model.fit(x, y, batch_size=128, verbose=0, callbacks=[callback])
    SPENT.clear()
    CALLS.clear()
    model.fit(x, y, batch_size=128, verbose=0, callbacks=[callback])
    print(f"keras backend {keras.backend.backend()}, read_every {args.read_every}")
    for name in ("_process", "capture", *hooks):
        per_call = SPENT[name] / max(CALLS[name], 1) * 1e6
        per_step = SPENT[name] / 256 * 1e6
        print(
            f"{name:20s} {CALLS[name]} calls, {per_call:.0f} us thread CPU each, "
            f"{per_step:.0f} a step"
        )


if __name__ == "__main__":
    main()
