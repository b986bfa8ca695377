"""The clipping-rule protocol, the global norm every rule reads, scaling
gradients to a norm, and what a gradient the rules see can be.

What a gradient the rules see can be: a dense tensor of the Keras backend,
or on TensorFlow also a `tf.IndexedSlices` or a tensor whose shape is known
only at run time. Those are handled in `_sparse`, imported only on the
TensorFlow backend, so on JAX `tensorflow` is never imported.

The clipping-rule protocol and the global norm every rule reads.

A rule is a small immutable object: hyper-parameters in, and two methods.
`state_spec()` names the variables it needs; `clip()` is pure tensor math in
`keras.ops` that maps (grads, weights, global norm, state values) to a
`ClipResult`: the clipped grads, the new state values and the post-clip
global norm. The caller owns the variables, so a rule never assigns
anything; the same code compiles under `tf.function(jit_compile=True)`
(AutoGraph off) on the TensorFlow backend and under `jax.jit` on JAX.

Scaling gradients to a norm, shared by the rules: by the global norm
(`scale_by_global_norm`, `tf.clip_by_global_norm`'s numbers), the norm after
it (`post_clip_norm`), and norms taken without squaring huge values
(`scaled_norm`, which AGC takes per unit).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

import keras
import numpy as np
from keras import backend as keras_backend
from keras import ops

from keras_gradmon import backend
from keras_gradmon.backend import Tensor
from keras_gradmon.core.batched import batched_global_norm


def _sparse() -> ModuleType | None:
    """`keras_gradmon.backend.tensorflow` on TensorFlow, else None."""
    if keras.backend.backend() != "tensorflow":
        return None
    return importlib.import_module("keras_gradmon.backend.tensorflow")


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
    does a conditional look again (`keras_gradmon.core.batched.batched_global_norm`):
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

    >>> from keras_gradmon.core.clipping import GlobalNormClip
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


def scaled_norm(x: Tensor, axes: list[int] | None) -> tuple[Tensor, Tensor]:
    """`(largest, relative)` over `axes` (None: all), kept as dims: the
    largest |x| (1 where it is 0) and the norm of `x / largest` (in
    [1, sqrt(size)]), so that the L2 norm is largest * relative without
    squaring values near the float32 limit (1e30) or tiny ones.

    Example:

    >>> largest, relative = scaled_norm(ops.convert_to_tensor([3e30, 4e30]), None)
    >>> float(largest[0]), float(relative[0])
    (4.000000060189865e+30, 1.25)
    """
    largest = ops.max(ops.abs(x), axis=axes, keepdims=True)
    scale = ops.where(largest > 0, largest, ops.ones_like(largest))
    # A division, not XLA's product with the reciprocal (zero past 2**126).
    ratio = backend.divide(x, scale)
    return scale, ops.sqrt(ops.sum(ops.square(ratio), axis=axes, keepdims=True))


def _global_root(grads: list[Any], norm: GlobalNorm) -> Tensor:
    """sqrt(`norm.exact`): finite wherever every element is.

    Where the backend computes in float32 only (JAX without
    `jax_enable_x64`), a norm past float32's largest value is Inf though
    every element is finite; its root is then taken from the elements,
    scaled, in a conditional that runs only on such a step."""
    root = ops.sqrt(norm.exact)
    if backend.wide_float() == "float64":
        return root

    dense = [backend.densify(g) for g in grads]
    parts = [ops.reshape(g, [-1]) for g in dense if backend.num_elements(g)]
    if not parts:
        return root

    def from_elements() -> Tensor:
        flat = ops.cast(ops.concatenate(parts, 0), "float32")
        largest, relative = scaled_norm(flat, None)
        return ops.reshape(ops.sqrt(largest) * ops.sqrt(relative), ())

    overflowed = ops.logical_and(ops.isinf(root), norm.finite)
    return backend.cond(overflowed, from_elements, lambda: root)


def scale_by_global_norm(
    grads: list[Any],
    norm: GlobalNorm,
    max_norm: Tensor | float,
    clip: Tensor | bool,
) -> list[Any]:
    """Rescales `grads` to global norm `max_norm` where `clip` is true.

    Where `norm.fast` is finite the scale is `tf.clip_by_global_norm`'s, op
    for op, so on TensorFlow a float32 result is bit-identical to
    `tf.clip_by_global_norm(grads, max_norm, use_norm=norm.fast)`. Where the
    float32 norm overflowed but every element is finite, the scale is
    `max_norm / norm.exact`: huge gradients are clipped, not turned into NaN.
    A `tf.IndexedSlices` stays one, its values scaled. Where `clip` does not
    hold the input is returned untouched (TF would multiply by
    `max_norm * (1 / max_norm)`, which can be one ulp off 1). A non-finite
    gradient gives NaN everywhere, as in TF: the caller decides to skip.

    Example:

    >>> from keras_gradmon.core.clipping import global_norm_of
    >>> g = [ops.convert_to_tensor([3.0, 4.0])]
    >>> [out] = scale_by_global_norm(g, global_norm_of(g), 1.0, True)
    >>> ops.convert_to_numpy(out).tolist()
    [0.6000000238418579, 0.800000011920929]
    """
    fast = ops.cast(norm.fast, "float32")
    max32 = ops.cast(max_norm, "float32")
    tf_scale = max32 * ops.minimum(1.0 / fast, 1.0 / max32) + (fast - fast)
    # Past float32 (finite elements, overflowed squares), max_norm / norm may
    # be subnormal, which CPUs flush to 0: it is applied as two normal
    # factors, 1 / sqrt(norm) and max_norm / sqrt(norm). A NaN/Inf element
    # keeps TF's scale, NaN.
    exact = ops.logical_and(ops.logical_not(ops.isfinite(fast)), norm.finite)
    root = _global_root(grads, norm)
    first = ops.where(exact, ops.cast(1.0 / root, "float32"), tf_scale)
    wide_max = ops.cast(max_norm, backend.wide_float())
    second = ops.where(exact, ops.cast(wide_max / root, "float32"), 1.0)
    keep = ops.logical_and(ops.logical_not(clip), ops.isfinite(root))
    return [_scaled(g, first, second, keep) for g in grads]


def _scaled(g: Any, first: Tensor, second: Tensor, keep: Tensor) -> Any:
    """`g * first * second`, or `g` itself where `keep`; a `tf.IndexedSlices`
    has its values scaled (its dense tensor is) and stays one."""

    def scale(values: Tensor) -> Tensor:
        dtype = compute_dtype(values.dtype)
        # Half precision is scaled in float32 and rounded once, not twice;
        # `* second` is an exact `* 1.0` wherever TF's own scale applies.
        wide = ops.cast(values, dtype) * ops.cast(first, dtype)
        wide = wide * ops.cast(second, dtype)
        return ops.where(keep, values, ops.cast(wide, values.dtype))

    return map_values(g, scale)


def post_clip_norm(
    norm: GlobalNorm, threshold: Tensor | float, clip: Tensor | bool
) -> Tensor:
    """The float32 global norm after `scale_by_global_norm`: the threshold
    where it clipped, the norm itself elsewhere, NaN on a non-finite step.

    Example:

    >>> from keras_gradmon.core.clipping import global_norm_of
    >>> norm = global_norm_of([ops.convert_to_tensor([3.0, 4.0])])
    >>> float(post_clip_norm(norm, 1.0, True)), float(post_clip_norm(norm, 1.0, False))
    (1.0, 5.0)
    """
    threshold = ops.cast(threshold, "float32")
    post = ops.where(clip, threshold, norm.clamped)
    return ops.where(norm.finite, post, float("nan"))
