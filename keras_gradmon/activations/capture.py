"""The activation probe on TensorFlow (Keras 3 and tf_keras): the probe
function traced once by `tf.function`, with the watched layers hooked while
it traces (`keras_gradmon.activations.layers`); later runs are one graph, no
Python. The model's variables are read by the graph itself. Imported only
on the TensorFlow backend (`keras_gradmon.activations.probe.capture_backend`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf


def flatten(structure: Any) -> list[Any]:
    """The leaves of a structure of tensors, in `tf.nest` order.

    Example:

    >>> flatten({"b": 2, "a": [1]})
    [1, 2]
    """
    return tf.nest.flatten(structure)


def as_inputs(data: Any) -> Any:
    """The probe batch as tensors (its structure kept).

    Example:

    >>> as_inputs([1.0]).dtype
    tf.float32
    """
    return tf.nest.map_structure(tf.convert_to_tensor, data)


def compile_probe(
    measure: Callable[[Any], dict], model: Any = None
) -> Callable[[Any, Any], dict]:
    """`measure` (probe batch -> tensors) as a `tf.function`, called as
    `run(data, state)`; `model` is not needed: the graph reads the
    variables, and `state` must be None.

    Example:

    >>> run = compile_probe(lambda x: {"sum": tf.reduce_sum(x)})
    >>> float(run(tf.ones([3]), None)["sum"])
    3.0
    """
    function = tf.function(measure, reduce_retracing=True)

    def run(data: Any, state: Any) -> dict:
        if state is not None:
            raise ValueError(
                "`state` is for the JAX backend, where a hand-written loop "
                "keeps the values outside the variables; on TensorFlow the "
                "probe reads the variables. Received: state is not None"
            )
        return function(data)

    return run
