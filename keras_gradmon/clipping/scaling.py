"""Scaling gradients to a norm, shared by the rules: by the global norm
(`scale_by_global_norm`, `tf.clip_by_global_norm`'s numbers), the norm after
it (`post_clip_norm`), and norms taken without squaring huge values
(`scaled_norm`, which AGC takes per unit)."""

from __future__ import annotations

from typing import Any

from keras import ops

from keras_gradmon import backend
from keras_gradmon.backend import Tensor
from keras_gradmon.clipping._gradients import map_values
from keras_gradmon.clipping.base import GlobalNorm, compute_dtype

__all__ = ["post_clip_norm", "scale_by_global_norm", "scaled_norm"]


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

    >>> from keras_gradmon.clipping import global_norm_of
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

    >>> from keras_gradmon.clipping import global_norm_of
    >>> norm = global_norm_of([ops.convert_to_tensor([3.0, 4.0])])
    >>> float(post_clip_norm(norm, 1.0, True)), float(post_clip_norm(norm, 1.0, False))
    (1.0, 5.0)
    """
    threshold = ops.cast(threshold, "float32")
    post = ops.where(clip, threshold, norm.clamped)
    return ops.where(norm.finite, post, float("nan"))
