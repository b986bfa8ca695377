"""Backend-neutral ways to run an optimizer's step in tests that run in the
TensorFlow process and, imported by `tests/jax`, in the JAX one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
from keras import ops


def compiled_apply(optimizer: Any, variables: Sequence[Any]) -> Callable[[list], None]:
    """`step(grads)`: `optimizer.apply(grads, variables)`, compiled: a
    `tf.function` on TensorFlow, a jitted `stateless_apply` on JAX (as a
    monitored optimizer's own eager `apply` runs, so that a plain and a
    monitored optimizer compare bit for bit)."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.function(lambda grads: optimizer.apply(grads, variables))
    import jax

    optimizer.build(variables)
    jitted = jax.jit(optimizer.stateless_apply)

    def step(grads: list) -> None:
        values = [v.value for v in optimizer.variables]
        new, state = jitted(values, list(grads), [v.value for v in variables])
        for variable, value in zip([*variables, *optimizer.variables], [*new, *state]):
            variable.assign(value)

    return step


def tensors(arrays: Sequence[Any]) -> list[Any]:
    """NumPy arrays as tensors of the current backend."""
    return [ops.convert_to_tensor(a) for a in arrays]
