"""The clipping-rule protocol and the global-norm scaling the rules share.

A rule is a small immutable object: hyper-parameters in, and two methods.
`state_spec()` names the variables it needs; `clip()` is pure tensor math
that maps (grads, weights, global norm, state values) to (clipped grads, new
state values). The caller owns the variables, so a rule never assigns
anything and compiles under `tf.function(jit_compile=True)` and with
AutoGraph off.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import tensorflow as tf

#: {variable name: (shape, dtype name, initial value)}.
StateSpec = dict[str, tuple[tuple[int, ...], str, float]]


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
        global_norm: tf.Tensor,
        state: dict[str, tf.Tensor],
    ) -> tuple[list[tf.Tensor], dict[str, tf.Tensor]]:
        """Returns (clipped grads, new state values), without side effects."""
        ...


def compute_dtype(dtype: tf.DType) -> tf.DType:
    """float64 for float64 tensors, else float32 (half precision is widened)."""
    return tf.float64 if dtype == tf.float64 else tf.float32


def scale_by_global_norm(
    grads: list[tf.Tensor],
    global_norm: tf.Tensor,
    max_norm: tf.Tensor | float,
    clip: tf.Tensor,
) -> list[tf.Tensor]:
    """Rescales `grads` to global norm `max_norm` where `clip` is true.

    The scale is `tf.clip_by_global_norm`'s, op for op, so a float32 result
    is bit-identical to `tf.clip_by_global_norm(grads, max_norm,
    use_norm=global_norm)` whenever `clip` holds. Where it does not, the
    input is returned untouched (TF would multiply by
    `max_norm * (1 / max_norm)`, which can be one ulp off 1). A non-finite
    `global_norm` gives NaN everywhere, as in TF: the caller decides to skip.

    Args:
        grads: Dense float tensors of any dtypes.
        global_norm: Scalar float32 L2 norm of all gradient elements.
        max_norm: Scalar target norm (positive).
        clip: Scalar bool, whether to rescale.

    Returns:
        The rescaled tensors, each in its input dtype.

    Example:

    >>> [g] = scale_by_global_norm([tf.constant([3.0, 4.0])], 5.0, 1.0, True)
    >>> g.numpy().tolist()
    [0.6000000238418579, 0.800000011920929]
    """
    norm = tf.cast(global_norm, tf.float32)
    max_norm = tf.cast(max_norm, tf.float32)
    scale = max_norm * tf.minimum(1.0 / norm, 1.0 / max_norm) + (norm - norm)
    keep = tf.logical_and(tf.logical_not(clip), tf.math.is_finite(norm))
    clipped = []
    for g in grads:
        dtype = compute_dtype(g.dtype)
        # Half precision is scaled in float32 and rounded once, not twice.
        scaled = tf.cast(tf.cast(g, dtype) * tf.cast(scale, dtype), g.dtype)
        clipped.append(tf.where(keep, g, scaled))
    return clipped
