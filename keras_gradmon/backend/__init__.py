"""What differs between Keras backends, in one small module per framework.

The statistics kernel (`keras_gradmon.stats`) is written in `keras.ops`;
what `keras.ops` cannot say the same way on every backend lives here: a
conditional whose untaken branch costs nothing, densifying and sizing the
inputs (TensorFlow's `tf.IndexedSlices` and shapes known only at run time),
counting integers into bins, the framework's own global norm, and the widest
float it computes in. Each function dispatches on `keras.backend.backend()`
and imports its framework only when called, so on JAX `tensorflow` is never
imported.

Example:

>>> from keras import ops
>>> float(cond(ops.convert_to_tensor(True), lambda: ops.ones(()),
...            lambda: ops.zeros(())))
1.0
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import keras

#: A tensor of the current backend (`tf.Tensor`, `jax.Array`).
Tensor = Any

_MODULES = {"tensorflow": "tensorflow", "jax": "jax"}


def current() -> ModuleType:
    """The module of the current Keras backend.

    Raises:
        NotImplementedError: for a backend other than TensorFlow or JAX.

    Example:

    >>> current().__name__.rsplit(".", 1)[-1] in ("tensorflow", "jax")
    True
    """
    name = keras.backend.backend()
    if name not in _MODULES:
        raise NotImplementedError(
            f"keras_gradmon computes statistics on the backends "
            f"{sorted(_MODULES)}. Received: keras.backend.backend()={name!r}"
        )
    return importlib.import_module(f"keras_gradmon.backend.{_MODULES[name]}")


def cond(pred: Tensor, true_fn: Callable[[], Any], false_fn: Callable[[], Any]) -> Any:
    """`true_fn()` where the boolean scalar `pred` holds, else `false_fn()`: a
    real conditional (only the taken branch runs), both branches returning
    the same structure of tensors.

    Example:

    >>> from keras import ops
    >>> float(cond(ops.convert_to_tensor(False), lambda: ops.ones(()),
    ...            lambda: ops.zeros(())))
    0.0
    """
    return current().cond(pred, true_fn, false_fn)


def densify(t: Any) -> Tensor:
    """`t` as a dense tensor of the backend (TensorFlow's `tf.IndexedSlices`
    with duplicate indices summed, keeping a static shape where known).

    Example:

    >>> tuple(densify([1.0, 2.0]).shape)
    (2,)
    """
    return current().densify(t)


def num_elements(t: Tensor) -> int | None:
    """The number of elements of dense `t`, None where known only at run time.

    Example:

    >>> num_elements(densify([[1.0, 2.0]]))
    2
    """
    return current().num_elements(t)


def dynamic_matrix(tensors: Sequence[Tensor], dtype: str) -> tuple[Tensor, Any]:
    """`stats.layout.prepare` of tensors, some of a size known only at run time
    (TensorFlow only: on JAX every shape is static).

    Example:

    >>> matrix, layout = dynamic_matrix(tensors, "float32")  # doctest: +SKIP
    """
    return current().dynamic_matrix(tensors, dtype)


def bincount(index: Tensor, size: int) -> Tensor:
    """How many times each of `0 .. size - 1` occurs in the int32 vector
    `index` (all in range), as an int32 vector of length `size`.

    Example:

    >>> bincount(densify([0, 2, 2]), 3).tolist()  # doctest: +SKIP
    [1, 0, 2]
    """
    return current().bincount(index, size)


def global_norm(values: Sequence[Tensor]) -> Tensor:
    """The framework's own L2 norm of all elements of `values` (one floating
    dtype): `tf.linalg.global_norm` on TensorFlow. May overflow.

    Example:

    >>> float(global_norm([densify([3.0]), densify([4.0])]))
    5.0
    """
    return current().global_norm(values)


def divide(x: Tensor, divisor: Tensor) -> Tensor:
    """`x / divisor`, `divisor` broadcast over the finite `x` (a scalar, or
    one per row), rounded once as IEEE division, as TensorFlow's kernels do.

    Example:

    >>> from keras import ops
    >>> float(divide(ops.ones([1, 2]) * 3e38, ops.ones([1, 1]) * 3e38)[0, 0])
    1.0
    """
    return current().divide(x, divisor)


def wide_float() -> str:
    """The widest float dtype the backend computes in: float64, except on JAX
    without `jax_enable_x64`, where it is float32.

    Example:

    >>> wide_float() in ("float64", "float32")
    True
    """
    return current().wide_float()
