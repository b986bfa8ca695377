"""The clipping-rule protocol and the global norm every rule reads.

A rule is a small immutable object: hyper-parameters in, and two methods.
`state_spec()` names the variables it needs; `clip()` is pure tensor math in
`keras.ops` that maps (grads, weights, global norm, state values) to a
`ClipResult`: the clipped grads, the new state values and the post-clip
global norm. The caller owns the variables, so a rule never assigns
anything; the same code compiles under `tf.function(jit_compile=True)`
(AutoGraph off) on the TensorFlow backend and under `jax.jit` on JAX.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

import numpy as np
from keras import backend as keras_backend
from keras import ops

from keras_gradmon import backend
from keras_gradmon.backend import Tensor
from keras_gradmon.clipping._gradients import as_gradient
from keras_gradmon.stats.norms import batched_global_norm

__all__ = [
    "ClipResult",
    "ClipRule",
    "GlobalNorm",
    "StateSpec",
    "as_gradient",
    "compute_dtype",
    "global_norm_of",
    "wide_int",
]

#: {variable name: (shape, dtype name, initial value)}.
StateSpec = dict[str, tuple[tuple[int, ...], str, float]]

_FLOAT32_MAX = float(np.finfo(np.float32).max)


def compute_dtype(dtype: Any) -> str:
    """float64 for float64 tensors, else float32 (half precision is widened).

    Example:

    >>> compute_dtype("float16"), compute_dtype("float64")
    ('float32', 'float64')
    """
    wide = keras_backend.standardize_dtype(dtype) == "float64"
    return "float64" if wide else "float32"


def wide_int() -> str:
    """The integer dtype of the rules' counters: int64, except on JAX without
    `jax_enable_x64` (int32 there, as JAX has no int64 then).

    Example:

    >>> wide_int() in ("int64", "int32")
    True
    """
    return "int64" if backend.wide_float() == "float64" else "int32"


@dataclasses.dataclass(frozen=True)
class GlobalNorm:
    """The L2 norm of all gradient elements, three ways.

    Attributes:
        fast: float32: the framework's global norm (`tf.linalg.global_norm`
            on TensorFlow) bit for bit wherever that is finite; else `exact`
            in float32 (Inf past float32's largest value, NaN when an
            element is NaN).
        exact: `backend.wide_float()` (float64 on TensorFlow), the true norm:
            finite whenever every element is, even when float32 squares
            overflow (gradients around 1e30). On JAX without
            `jax_enable_x64` it is float32: Inf for a norm past float32's
            largest value (the rules still scale such gradients correctly).
        finite: bool, whether every gradient element is finite.

    Example:

    >>> float(GlobalNorm(ops.ones(()), ops.ones(()) * 1e39, True).clamped)
    3.4028234663852886e+38
    """

    fast: Tensor
    exact: Tensor
    finite: Tensor

    @property
    def clamped(self) -> Tensor:
        """float32 `exact`, at most float32's largest value (NaN stays NaN):
        what rules keep in their float32 histories."""
        return ops.cast(ops.minimum(self.exact, _FLOAT32_MAX), "float32")


@dataclasses.dataclass(frozen=True)
class ClipResult:
    """What a rule returns: clipped grads (input dtypes), new state values,
    and the float32 global norm after clipping (NaN on a non-finite step).

    Example:

    >>> ClipResult([], {}, ops.zeros(())).state
    {}
    """

    grads: list[Any]
    state: dict[str, Tensor]
    post_norm: Tensor


def global_norm_of(grads: list[Any]) -> GlobalNorm:
    """The global norm of `grads`, overflow-safe; a `tf.IndexedSlices`
    counts as its dense tensor (duplicate indices summed).

    The common case is one pass: the framework's own global norm
    (`tf.linalg.global_norm` on TensorFlow). Only when that is not finite
    does a conditional look again (`keras_gradmon.stats.batched_global_norm`):
    it tells real NaN/Inf elements from float32 squares that overflowed, and
    computes the norm scaled, in float64 (`backend.wide_float()`), where a
    norm above float32's largest value fits.

    Example:

    >>> norm = global_norm_of([ops.convert_to_tensor([3e30, 4e30])])
    >>> float(norm.fast), float(norm.exact), bool(norm.finite)  # TensorFlow
    (4.9999999241216036e+30, 4.999999984567896e+30, True)
    """
    exact, finite = batched_global_norm(grads)
    return GlobalNorm(ops.cast(exact, "float32"), exact, finite)


@runtime_checkable
class ClipRule(Protocol):
    """What every clipping rule provides.

    Example:

    >>> from keras_gradmon.clipping import GlobalNormClip
    >>> isinstance(GlobalNormClip(1.0), ClipRule)
    True
    """

    name: str

    def state_spec(self) -> StateSpec:
        """Variables the rule needs: {name: (shape, dtype, initial value)}."""
        ...

    def clip(
        self,
        grads: list[Any],
        weights: list[Tensor],
        norm: GlobalNorm,
        state: dict[str, Tensor],
    ) -> ClipResult:
        """Returns the clipped grads, new state values and post-clip norm,
        without side effects."""
        ...
