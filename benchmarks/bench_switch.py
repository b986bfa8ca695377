"""The training thread's longest step, around the switch from the measuring
program to the idle and due ones (`keras_gradmon.programs`), on JAX's CPU.

A fresh process fits a fresh model of `_models.py` at the defaults, with
`GradientMonitorCallback`, `--epochs` epochs of `--steps` steps, and stamps
the start of each batch on the training thread. It prints, for the monitored
fit and a plain one in the same process: the first call (its trace and
compile), the longest step after it, the whole fit, and the calls each
program ran. The measuring program runs until the run has lasted as long as
its first call; the idle and due programs are then compiled at their first
calls, on the training thread (a stall as long as their compiles), or with
`--aside` on a thread of their own while the measuring program runs on
(`Programs.compile_aside_on_cpu`; what runs by default where JAX computes
on an accelerator). Steps are dispatched asynchronously: what a step costs
the device shows where the host waits for it, at each epoch's end.

    .venv/bin/python benchmarks/bench_switch.py [--aside]
    .venv/bin/python benchmarks/bench_switch.py --model resnet50v2_64 --steps 64
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import argparse
import tempfile
import time

import keras
from _models import MODELS
from _signals import DEFAULTS, make_optimizer

from keras_gradmon import GradientMonitorCallback
from keras_gradmon.programs import Programs


class Stamps(keras.callbacks.Callback):
    """The `time.perf_counter()` of each batch's start, and of the fit's end."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def on_train_batch_begin(self, batch, logs=None) -> None:
        self.times.append(time.perf_counter())

    def on_train_end(self, logs=None) -> None:
        self.times.append(time.perf_counter())


def run(model_name: str, monitored: bool, epochs: int, steps: int) -> dict:
    """One fit of `epochs` epochs; its first call, longest later step, total
    seconds and program calls."""
    spec = MODELS[model_name]
    x, y = spec.data(steps)
    keras.utils.set_random_seed(0)
    model = spec.build()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(make_optimizer(DEFAULTS if monitored else None), loss)
    stamps = Stamps()
    callbacks = [stamps]
    if monitored:
        callbacks.append(GradientMonitorCallback(tempfile.mkdtemp(), alerts=False))
    start = time.perf_counter()
    model.fit(
        x, y, batch_size=spec.batch, epochs=epochs, verbose=0, callbacks=callbacks
    )
    total = time.perf_counter() - start
    steps_s = [b - a for a, b in zip(stamps.times, stamps.times[1:])]
    programs = Programs.made_for(model)
    return {
        "first": steps_s[0],
        "longest": max(steps_s[1:]),
        "at": 1 + steps_s[1:].index(max(steps_s[1:])),
        "total": total,
        "calls": programs.calls if programs else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp", choices=sorted(MODELS))
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--aside", action="store_true")
    args = parser.parse_args()
    Programs.compile_aside_on_cpu = args.aside
    print("| fit | first call s | longest later step s | at step | fit s | calls |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for label, monitored in (("plain", False), ("defaults", True)):
        r = run(args.model, monitored, args.epochs, args.steps)
        print(
            f"| {label} | {r['first']:.2f} | {r['longest']:.3f} | {r['at']} "
            f"| {r['total']:.2f} | {r['calls'] or '-'} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
