"""What a gradient the rules see can be: a dense tensor of the Keras backend,
or on TensorFlow also a `tf.IndexedSlices` or a tensor whose shape is known
only at run time. Those are handled in `_sparse`, imported only on the
TensorFlow backend, so on JAX `tensorflow` is never imported."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import keras
from keras import ops

from keras_gradmon.backend import Tensor


def _sparse() -> ModuleType | None:
    """`keras_gradmon.clipping._sparse` on TensorFlow, else None."""
    if keras.backend.backend() != "tensorflow":
        return None
    return importlib.import_module("keras_gradmon.clipping._sparse")


def as_gradient(g: Any) -> Any:
    """`g` as a tensor of the backend; a `tf.IndexedSlices` (an `Embedding`'s
    gradient) is kept as it is: the rules scale its rows, so the inner
    optimizer still gets a sparse update, and the global norm counts it as
    its dense tensor.

    Example:

    >>> from keras import backend
    >>> backend.standardize_dtype(as_gradient([1.0, 2.0]).dtype)
    'float32'
    """
    sparse = _sparse()
    return ops.convert_to_tensor(g) if sparse is None else sparse.as_gradient(g)


def map_values(g: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    """`fn(g)`; for a `tf.IndexedSlices`, the same slices with `fn(values)`
    (its dense tensor is `fn` of the dense one for an elementwise `fn`).

    Example:

    >>> float(map_values(ops.ones([2]), lambda v: v * 3.0)[0])
    3.0
    """
    sparse = _sparse()
    return fn(g) if sparse is None else sparse.map_values(g, fn)


def with_static_shape(g: Tensor, shape: Any) -> Tensor:
    """Dense `g` with the static `shape` where its own is known only at run
    time (TensorFlow; on JAX every shape is static).

    Example:

    >>> tuple(with_static_shape(ops.ones([2]), (2,)).shape)
    (2,)
    """
    sparse = _sparse()
    return g if sparse is None else sparse.with_static_shape(g, shape)
