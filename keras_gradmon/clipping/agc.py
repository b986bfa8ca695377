"""Unit-wise adaptive gradient clipping (AGC) relative to the weights' norms.

Brock, De, Smith, Simonyan, "High-Performance Large-Scale Image Recognition
Without Normalization" (NFNets), ICML 2021 (arXiv:2102.06171). Followed:
`unitwise_norm` and `SGD_AGC` in google-deepmind/deepmind-research
`nfnets/optim.py`, and optax's `unitwise_norm` / `unitwise_clip` /
`adaptive_grad_clip` (same rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import tensorflow as tf

from keras_gradmon import _validation
from keras_gradmon.clipping.base import (
    ClipResult,
    GlobalNorm,
    StateSpec,
    compute_dtype,
    global_norm_of,
)
from keras_gradmon.stats.layout import densify

# Guards the division where a unit's gradient norm is 0 (the reference's
# `max(||G||, 1e-6)`); it cannot engage, as a zero unit is never clipped.
_DIV_EPS = 1e-6


def unitwise_axes(shape: tf.TensorShape) -> list[int] | None:
    """The axes `unitwise_norm` reduces over for a tensor of `shape`.

    As in the NFNets reference and optax: tensors with at most one
    non-unit dimension (scalars, biases, [1, n] or [n, 1] kernels) form a
    single unit, i.e. the norm of the whole tensor (None); rank 2 and 3
    (Dense kernel [in, out], multi-head [in, heads, dim]) reduce axis 0;
    rank 4 (Conv2D kernel HWIO) reduces (0, 1, 2). Rank 5 and up (Conv3D
    DHWIO), which the references reject, reduce every axis but the last.

    Example:

    >>> unitwise_axes(tf.TensorShape([3, 3, 8, 16]))
    [0, 1, 2]
    """
    rank = shape.rank
    if rank is None:
        raise ValueError(f"AGC needs tensors of known rank. Received: shape={shape}")
    if sum(1 for d in shape if d != 1) <= 1:
        return None
    if rank in (2, 3):
        return [0]
    return list(range(rank - 1))


def _unit_parts(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """`(largest, relative)` per unit: the unit's largest |x| and the norm of
    `x / largest` (in [1, sqrt(size)]), so that norm = largest * relative
    without squaring values near the float32 limit (1e30) or tiny ones."""
    axes = unitwise_axes(x.shape)
    largest = tf.reduce_max(tf.abs(x), axis=axes, keepdims=True)
    scale = tf.where(largest > 0, largest, tf.ones_like(largest))
    relative = tf.sqrt(tf.reduce_sum(tf.square(x / scale), axis=axes, keepdims=True))
    return scale, relative


def unitwise_norm(x: tf.Tensor) -> tf.Tensor:
    """L2 norm of each output unit of `x`, broadcastable against `x`.

    Example:

    >>> unitwise_norm(tf.constant([[3.0, 0.0], [4.0, 1.0]])).numpy().tolist()
    [[5.0, 1.0]]
    """
    scale, relative = _unit_parts(x)
    return scale * relative


@dataclass(frozen=True)
class AdaptiveGradientClip:
    """Clips each unit's gradient to `clipping` times its weight's norm.

    Per output unit: max_norm = clipping * max(||W||, eps), and
    G <- G * max_norm / ||G|| where ||G|| >= max_norm; other units are
    returned untouched (see `unitwise_norm` for what a unit is). Stateless;
    `global_norm` is not used, so a non-finite gradient only affects its
    own unit (NaN there), exactly as in the references.

    Args:
        clipping: The largest allowed ratio ||G|| / ||W|| per unit.
        eps: Floor on ||W||, so zero-initialised weights can still move.

    Example:

    >>> from keras_gradmon.clipping import global_norm_of
    >>> rule = AdaptiveGradientClip(clipping=0.1)
    >>> w, g = tf.constant([[3.0], [4.0]]), tf.constant([[0.0], [2.0]])
    >>> result = rule.clip([g], [w], global_norm_of([g]), {})
    >>> result.grads[0].numpy().ravel().tolist()  # ||W|| = 5: ||G|| <= 0.5
    [0.0, 0.5]
    """

    name: ClassVar[str] = "agc"
    clipping: float = 0.01
    eps: float = 1e-3

    def __post_init__(self) -> None:
        clipping = _validation.positive_finite("clipping", self.clipping)
        object.__setattr__(self, "clipping", clipping)
        object.__setattr__(self, "eps", _validation.positive_finite("eps", self.eps))

    def state_spec(self) -> StateSpec:
        return {}

    def clip(
        self,
        grads: list[tf.Tensor],
        weights: list[tf.Tensor],
        norm: GlobalNorm,
        state: dict[str, tf.Tensor],
    ) -> ClipResult:
        del norm, state  # unit-wise and stateless
        if len(grads) != len(weights):
            raise ValueError(
                "AGC needs one weight per gradient. Received: "
                f"{len(grads)} gradients and {len(weights)} weights"
            )
        clipped = []
        for g, w in zip(grads, weights):
            # Units span rows: a `tf.IndexedSlices` is clipped dense. The
            # weight's static shape stands for a gradient's unknown one.
            g = densify(g)
            if not g.shape.is_fully_defined():
                g = tf.ensure_shape(g, w.shape)
            dtype = compute_dtype(g.dtype)
            g32 = tf.cast(g, dtype)
            w_norm = unitwise_norm(tf.cast(w, dtype))
            scale, relative = _unit_parts(g32)
            g_norm = scale * relative  # Inf past float32: then it clips
            max_norm = self.clipping * tf.maximum(w_norm, self.eps)
            # G * max_norm / ||G||, as (G / scale) * (max_norm / relative):
            # no intermediate overflows, even when ||G|| does not fit.
            floor = _DIV_EPS / scale
            scaled = (g32 / scale) * (max_norm / tf.maximum(relative, floor))
            clipped.append(tf.where(g_norm < max_norm, g, tf.cast(scaled, g.dtype)))
        after = global_norm_of(clipped)
        post = tf.where(after.finite, after.clamped, float("nan"))
        return ClipResult(clipped, {}, post)
