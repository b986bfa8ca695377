"""A cheap eager read of a state variable, for the training thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf


class Reader:
    """A cheap eager read of `variable`: the raw `ReadVariableOp` (about 8 us)
    for a plain resource variable, `tf.identity` for anything else (a
    distributed variable). Resolved at the first read, on the host: while
    the state is built, inside the traced step, a Keras variable's `value`
    is a graph tensor. The tensor read is a snapshot: a later assign writes
    a new buffer while a reader holds the old one."""

    def __init__(self, variable: Any) -> None:
        self._variable = variable
        self._read: Callable[[], tf.Tensor] | None = None

    def __call__(self) -> tf.Tensor:
        if self._read is None:
            self._read = self._resolve()
        return self._read()

    def _resolve(self) -> Callable[[], tf.Tensor]:
        from tensorflow.python.ops import gen_resource_variable_ops
        from tensorflow.python.ops.resource_variable_ops import BaseResourceVariable

        variable = self._variable
        inner = getattr(variable, "value", variable)  # a Keras 3 variable's tf one
        # Not a distributed variable: that is no BaseResourceVariable.
        if tf.executing_eagerly() and isinstance(inner, BaseResourceVariable):
            handle, dtype = inner.handle, inner.dtype
            return lambda: gen_resource_variable_ops.read_variable_op(handle, dtype)
        return lambda: tf.identity(variable)
