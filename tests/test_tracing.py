"""AutoGraph stops at the library's boundary: a user's `tf.function`, written
in a file (this one), that calls a wrapper's `apply` converts none of the
library's functions (they have no Python control flow on tensors, and
converting them took 90% of the tracing time of a small model)."""

from __future__ import annotations

import contextlib
import logging

import keras
import numpy as np
import tensorflow as tf

import keras_gradmon


class _Calls(logging.Handler):
    """The callables AutoGraph's `converted_call` was asked to convert."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.callables: list = []

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Converted call") and record.args:
            self.callables.append(record.args[0])


@contextlib.contextmanager
def converted_calls():
    """Collects AutoGraph's converted calls (its verbosity-1 log)."""
    handler, logger = _Calls(), tf.get_logger()
    level = logger.level
    tf.autograph.set_verbosity(1)
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler.callables
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        tf.autograph.set_verbosity(0)


def library_calls(callables: list) -> set[str]:
    """The qualified names of the library's callables among `callables`."""
    names = set()
    for f in callables:
        module = getattr(f, "__module__", None) or ""
        if module.startswith("keras_gradmon"):
            names.add(getattr(f, "__qualname__", repr(f)))
    return names


def test_autograph_converts_no_library_function():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3),
        every_n_steps=1,
        histogram_every_n_steps=1,
        clipping={"method": "global_norm", "max_norm": 1.0},
    )

    @tf.function  # AutoGraph on, as users write it
    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    x = tf.constant(np.ones((2, 4), np.float32))
    with converted_calls() as calls:
        train_step(x)
    # AutoGraph sees the call of `apply` from the user's code, and no
    # function behind it (without the boundary: about 80 of them).
    assert library_calls(calls) == {"GradientMonitorOptimizer.apply"}
    assert int(optimizer.iterations) == 1
    assert np.isfinite(optimizer.snapshot().totals["grad_norm"])
