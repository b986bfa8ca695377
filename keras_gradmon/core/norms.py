"""L2 norms of many tensors together: from their elements (overflow-safe), or
from their own norms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from keras import backend as keras_backend
from keras import ops

from keras_gradmon import backend
from keras_gradmon.backend import Tensor

# ---- from stats.norms ----

def combine_norms(norms: Any) -> Tensor:
    """L2 norm of the concatenation of tensors, given each tensor's L2 norm.

    This is sqrt(sum of squares) of every element, never a sum of norms.
    It is scaled by the largest norm so that norms near the float32 limit do
    not overflow when squared.

    Args:
        norms: A 1-D float tensor of per-tensor L2 norms (may be empty).

    Returns:
        A scalar tensor of the same dtype; 0 for an empty input.

    Example:

    >>> import numpy as np
    >>> float(combine_norms(np.array([3.0, 4.0], "f4")))
    5.0
    """
    norms = ops.convert_to_tensor(norms)
    largest = ops.max(norms, initial=0.0)
    scale = ops.where(largest > 0, largest, ops.ones_like(largest))
    return scale * ops.sqrt(ops.sum(ops.square(norms / scale)))


def _same_dtype(values: list) -> list:
    """`values` cast to float32 (float64 if any is) unless already all float32
    or all float64."""
    dtypes = {keras_backend.standardize_dtype(v.dtype) for v in values}
    if len(dtypes) > 1 or dtypes - {"float32", "float64"}:
        wide = "float64" if "float64" in dtypes else "float32"
        values = [ops.cast(v, wide) for v in values]
    return values


def batched_global_norm(tensors: Sequence[Any]) -> tuple[Tensor, Tensor]:
    """The L2 norm of all elements together, safe from overflow.

    Usually the framework's own global norm (`tf.linalg.global_norm(tensors)`
    bit for bit on TensorFlow), None skipped; a `tf.IndexedSlices` counts as
    its dense tensor, duplicate indices summed (`tf.linalg.global_norm`
    would count its values: another number when an index repeats); if that
    is not finite, one conditional recomputes it scaled, in float64 (finite
    float32 tensors can have a norm above float32's max; on JAX without
    `jax_enable_x64`, in float32: such a norm is then inf). Shapes may be
    known only at run time (TensorFlow).

    Args:
        tensors: Floating tensors; if of several or half-precision dtypes,
            cast to float32 (float64 if any is) first.

    Returns:
        `(norm, all_finite)`: a float64 scalar (`backend.wide_float()`; the
        value of the framework's global norm cast, also when NaN or Inf) and
        whether every element is finite.

    Example:

    >>> import numpy as np
    >>> norm, finite = batched_global_norm([np.array([3e30, 4e30], "f4")])
    >>> round(float(norm) / 1e30, 4), bool(finite)  # squares above float32's max
    (5.0, True)
    """
    values = [backend.densify(t) for t in tensors if t is not None]
    wide = backend.wide_float()
    if not values:
        return ops.convert_to_tensor(0.0, wide), ops.convert_to_tensor(True)
    values = _same_dtype(values)
    fast = backend.global_norm(values)

    def rescue() -> tuple[Tensor, Tensor]:
        parts = [ops.reshape(v, [-1]) for v in values]
        flat = ops.cast(ops.concatenate(parts, 0), wide)
        finite = ops.isfinite(flat)
        largest = ops.max(ops.where(finite, ops.abs(flat), 0.0), initial=0.0)
        scale = ops.where(largest > 0, largest, 1.0)
        norm = scale * ops.sqrt(ops.sum(ops.square(flat / scale)))
        all_finite = ops.all(finite)
        return ops.where(all_finite, norm, ops.cast(fast, wide)), all_finite

    exact = (ops.cast(fast, wide), ops.convert_to_tensor(True))
    return backend.cond(ops.isfinite(fast), lambda: exact, rescue)
