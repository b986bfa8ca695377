"""The JAX backend: `jax.lax.cond`, and everything else static (JAX arrays
have static shapes; there is no sparse gradient to densify)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from keras import ops

__all__ = ["bincount", "cond", "densify", "global_norm", "num_elements"]


def cond(
    pred: jax.Array, true_fn: Callable[[], Any], false_fn: Callable[[], Any]
) -> Any:
    """`jax.lax.cond(pred, true_fn, false_fn)`: under `jax.jit` only the taken
    branch runs.

    Example:

    >>> float(cond(jnp.array(True), lambda: jnp.ones(()), lambda: jnp.zeros(())))
    1.0
    """
    return jax.lax.cond(pred, true_fn, false_fn)


def densify(t: Any) -> jax.Array:
    """`t` as a JAX array.

    Example:

    >>> densify([1.0]).shape
    (1,)
    """
    return ops.convert_to_tensor(t)


def num_elements(t: jax.Array) -> int:
    """The number of elements of `t` (always static).

    Example:

    >>> num_elements(jnp.ones([2, 3]))
    6
    """
    return math.prod(t.shape)


def bincount(index: jax.Array, size: int) -> jax.Array:
    """Occurrences of `0 .. size - 1` in `index`, as int32.

    Example:

    >>> bincount(jnp.array([0, 2, 2]), 3).tolist()
    [1, 0, 2]
    """
    return jnp.bincount(index, length=size).astype(jnp.int32)


def global_norm(values: Sequence[jax.Array]) -> jax.Array:
    """sqrt of the sum of every element's square, in the values' dtype.

    Example:

    >>> float(global_norm([jnp.array([3.0]), jnp.array([4.0])]))
    5.0
    """
    return ops.sqrt(ops.sum(ops.stack([ops.sum(ops.square(v)) for v in values])))


def divide(x: jax.Array, divisor: jax.Array) -> jax.Array:
    """`x / divisor`, `divisor` broadcast over the finite `x`, rounded once.

    XLA turns a division by a broadcast into a multiplication by the
    reciprocal: rounded twice, and zero for a divisor above 2**126. A
    divisor of `x`'s own shape (`x * 0` added: 0, as `x` is finite) keeps
    the division.

    Example:

    >>> float(divide(jnp.full([1, 2], 3e38), jnp.full([1, 1], 3e38))[0, 0])
    1.0
    """
    return x / (divisor + x * 0.0)


def wide_float() -> str:
    """float64 where `jax_enable_x64` is on, else float32.

    Example:

    >>> wide_float() in ("float32", "float64")
    True
    """
    return "float64" if jax.config.jax_enable_x64 else "float32"
