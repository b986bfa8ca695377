"""The wrappers of TensorFlow's older optimizer frameworks, as tf-agents uses
them: tf_keras optimizers (`legacy.tf_keras`, under `TF_USE_LEGACY_KERAS=1`)
and `tf.compat.v1.train` optimizers (`legacy.tf_v1`), both recording against
a step variable of the caller's (`legacy.stepped`), and the in-graph writing
of their statistics under a default `tf.summary` writer
(`legacy.graph_writer`). Each imports TensorFlow; nothing here is imported
on the JAX backend. `keras_gradmon.wrap` picks the wrapper of an optimizer's
kind."""

from __future__ import annotations

from typing import Any


def wrapper_for(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
    """The wrapper of a tf_keras or `tf.compat.v1.train` `optimizer`, made
    with `*args` and `**kwargs` (`config`, `name`, `MonitorConfig` options,
    `step`).

    Example:

    >>> wrapper_for(tf.compat.v1.train.AdamOptimizer(1e-3))  # doctest: +SKIP
    """
    from keras_gradmon.wrapping import kind_of, unsupported_error

    kind = kind_of(optimizer)
    if kind == "tf_keras":
        from keras_gradmon.legacy.tf_keras import TfKerasGradientMonitorOptimizer

        return TfKerasGradientMonitorOptimizer(optimizer, *args, **kwargs)
    if kind == "tf_v1":
        from keras_gradmon.legacy.tf_v1 import V1GradientMonitorOptimizer

        return V1GradientMonitorOptimizer(optimizer, *args, **kwargs)
    raise unsupported_error(optimizer, "inner_optimizer")
