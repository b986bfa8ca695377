"""The clipping-rule protocol, the global norm every rule reads, and the
global-norm scaling the rules share.

A rule is a small immutable object: hyper-parameters in, and two methods.
`state_spec()` names the variables it needs; `clip()` is pure tensor math
that maps (grads, weights, global norm, state values) to a `ClipResult`:
the clipped grads, the new state values and the post-clip global norm. The
caller owns the variables, so a rule never assigns anything and compiles
under `tf.function(jit_compile=True)` and with AutoGraph off.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

import numpy as np
import tensorflow as tf

from keras_gradmon.stats.norms import batched_global_norm

#: {variable name: (shape, dtype name, initial value)}.
StateSpec = dict[str, tuple[tuple[int, ...], str, float]]

_FLOAT32_MAX = float(np.finfo(np.float32).max)


def compute_dtype(dtype: tf.DType) -> tf.DType:
    """float64 for float64 tensors, else float32 (half precision is widened)."""
    return tf.float64 if dtype == tf.float64 else tf.float32


@dataclasses.dataclass(frozen=True)
class GlobalNorm:
    """The L2 norm of all gradient elements, three ways.

    Attributes:
        fast: float32: `tf.linalg.global_norm` bit for bit wherever that is
            finite; else `exact` in float32 (Inf past float32's largest
            value, NaN when an element is NaN).
        exact: float64, the true norm: finite whenever every element is,
            even when float32 squares overflow (gradients around 1e30).
        finite: bool, whether every gradient element is finite.
    """

    fast: tf.Tensor
    exact: tf.Tensor
    finite: tf.Tensor

    @property
    def clamped(self) -> tf.Tensor:
        """float32 `exact`, at most float32's largest value (NaN stays NaN):
        what rules keep in their float32 histories."""
        return tf.cast(tf.minimum(self.exact, _FLOAT32_MAX), tf.float32)


@dataclasses.dataclass(frozen=True)
class ClipResult:
    """What a rule returns: clipped grads (input dtypes), new state values,
    and the float32 global norm after clipping (NaN on a non-finite step)."""

    grads: list[tf.Tensor]
    state: dict[str, tf.Tensor]
    post_norm: tf.Tensor


def as_gradient(g: object) -> tf.Tensor | tf.IndexedSlices:
    """`g` as a tensor; a `tf.IndexedSlices` (an `Embedding`'s gradient) is
    kept as it is: the rules scale its rows, so the inner optimizer still
    gets a sparse update, and the global norm counts it as its dense tensor.

    Example:

    >>> as_gradient([1.0, 2.0]).dtype
    tf.float32
    """
    return g if isinstance(g, tf.IndexedSlices) else tf.convert_to_tensor(g)


def global_norm_of(grads: list[tf.Tensor | tf.IndexedSlices]) -> GlobalNorm:
    """The global norm of `grads`, overflow-safe; a `tf.IndexedSlices`
    counts as its dense tensor (duplicate indices summed).

    The common case is one pass: `tf.linalg.global_norm` itself. Only when
    that is not finite does a conditional look again
    (`keras_gradmon.stats.batched_global_norm`): it tells real NaN/Inf
    elements from float32 squares that overflowed, and computes the norm
    scaled, in float64, where a norm above float32's largest value fits.

    Example:

    >>> norm = global_norm_of([tf.constant([3e30, 4e30])])
    >>> float(norm.fast), float(norm.exact), bool(norm.finite)
    (4.9999999241216036e+30, 4.999999984567896e+30, True)
    """
    exact, finite = batched_global_norm(grads)
    return GlobalNorm(tf.cast(exact, tf.float32), exact, finite)


def scale_by_global_norm(
    grads: list[tf.Tensor],
    norm: GlobalNorm,
    max_norm: tf.Tensor | float,
    clip: tf.Tensor,
) -> list[tf.Tensor]:
    """Rescales `grads` to global norm `max_norm` where `clip` is true.

    Where `norm.fast` is finite the scale is `tf.clip_by_global_norm`'s, op
    for op, so a float32 result is bit-identical to `tf.clip_by_global_norm(
    grads, max_norm, use_norm=norm.fast)`. Where the float32 norm overflowed
    but every element is finite, the scale is `max_norm / norm.exact`, from
    the float64 norm: huge gradients are clipped, not turned into NaN.
    A `tf.IndexedSlices` stays one, its values scaled. Where `clip` does
    not hold the input is returned untouched (TF would
    multiply by `max_norm * (1 / max_norm)`, which can be one ulp off 1). A
    non-finite gradient gives NaN everywhere, as in TF: the caller decides
    to skip.

    Example:

    >>> norm = global_norm_of([tf.constant([3.0, 4.0])])
    >>> [g] = scale_by_global_norm([tf.constant([3.0, 4.0])], norm, 1.0, True)
    >>> g.numpy().tolist()
    [0.6000000238418579, 0.800000011920929]
    """
    fast = tf.cast(norm.fast, tf.float32)
    max32 = tf.cast(max_norm, tf.float32)
    tf_scale = max32 * tf.minimum(1.0 / fast, 1.0 / max32) + (fast - fast)
    # Past float32 (finite elements, overflowed squares), max_norm / norm may
    # be subnormal, which CPUs flush to 0: it is applied as two normal
    # factors, 1 / sqrt(norm) and max_norm / sqrt(norm). A NaN/Inf element
    # keeps TF's scale, NaN.
    exact = tf.logical_and(tf.logical_not(tf.math.is_finite(fast)), norm.finite)
    root = tf.sqrt(norm.exact)
    first = tf.where(exact, tf.cast(1.0 / root, tf.float32), tf_scale)
    wide_max = tf.cast(max_norm, tf.float64)
    second = tf.where(exact, tf.cast(wide_max / root, tf.float32), 1.0)
    keep = tf.logical_and(tf.logical_not(clip), tf.math.is_finite(norm.exact))
    return [_scaled(g, first, second, keep) for g in grads]


def _scaled(g, first: tf.Tensor, second: tf.Tensor, keep: tf.Tensor):
    """`g * first * second`, or `g` itself where `keep`; a `tf.IndexedSlices`
    has its values scaled (its dense tensor is) and stays one."""
    if isinstance(g, tf.IndexedSlices):
        values = _scaled(g.values, first, second, keep)
        return tf.IndexedSlices(values, g.indices, g.dense_shape)
    dtype = compute_dtype(g.dtype)
    # Half precision is scaled in float32 and rounded once, not twice;
    # `* second` is an exact `* 1.0` wherever TF's own scale applies.
    wide = tf.cast(g, dtype) * tf.cast(first, dtype) * tf.cast(second, dtype)
    return tf.where(keep, g, tf.cast(wide, g.dtype))


def post_clip_norm(
    norm: GlobalNorm, threshold: tf.Tensor | float, clip: tf.Tensor
) -> tf.Tensor:
    """The float32 global norm after `scale_by_global_norm`: the threshold
    where it clipped, the norm itself elsewhere, NaN on a non-finite step."""
    threshold = tf.cast(threshold, tf.float32)
    post = tf.where(clip, threshold, norm.clamped)
    return tf.where(norm.finite, post, tf.constant(float("nan")))


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
        grads: list[tf.Tensor],
        weights: list[tf.Tensor],
        norm: GlobalNorm,
        state: dict[str, tf.Tensor],
    ) -> ClipResult:
        """Returns the clipped grads, new state values and post-clip norm,
        without side effects."""
        ...
