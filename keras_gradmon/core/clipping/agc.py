"""Unit-wise adaptive gradient clipping (AGC) relative to the weights' norms.

Brock, De, Smith, Simonyan, "High-Performance Large-Scale Image Recognition
Without Normalization" (NFNets), ICML 2021 (arXiv:2102.06171). Followed:
`unitwise_norm` and `SGD_AGC` in google-deepmind/deepmind-research
`nfnets/optim.py`, and optax's `unitwise_norm` / `unitwise_clip` /
`adaptive_grad_clip` (same rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from keras import ops

from keras_gradmon import backend, validation
from keras_gradmon.backend import Tensor
from keras_gradmon.core.clipping.base import (
    ClipResult,
    GlobalNorm,
    StateSpec,
    compute_dtype,
    global_norm_of,
    scaled_norm,
    with_static_shape,
)

# Guards the division where a unit's gradient norm is 0 (the reference's
# `max(||G||, 1e-6)`); it cannot engage, as a zero unit is never clipped.
_DIV_EPS = 1e-6


def unitwise_axes(shape: Any) -> list[int] | None:
    """The axes `unitwise_norm` reduces over for a tensor of `shape`.

    As in the NFNets reference and optax: tensors with at most one
    non-unit dimension (scalars, biases, [1, n] or [n, 1] kernels) form a
    single unit, i.e. the norm of the whole tensor (None); rank 2 and 3
    (Dense kernel [in, out], multi-head [in, heads, dim]) reduce axis 0;
    rank 4 (Conv2D kernel HWIO) reduces (0, 1, 2). Rank 5 and up (Conv3D
    DHWIO), which the references reject, reduce every axis but the last.

    Args:
        shape: A tuple, or a `tf.TensorShape` (of known rank).

    Example:

    >>> unitwise_axes((3, 3, 8, 16))
    [0, 1, 2]
    """
    if getattr(shape, "rank", 0) is None:
        raise ValueError(f"AGC needs tensors of known rank. Received: shape={shape}")
    dims = tuple(shape)
    if sum(1 for d in dims if d != 1) <= 1:
        return None
    if len(dims) in (2, 3):
        return [0]
    return list(range(len(dims) - 1))


def _unit_parts(x: Tensor) -> tuple[Tensor, Tensor]:
    """`scaled_norm` of each unit of `x`: `(largest, relative)`, so that
    norm = largest * relative without overflow (1e30) or underflow."""
    return scaled_norm(x, unitwise_axes(x.shape))


def unitwise_norm(x: Tensor) -> Tensor:
    """L2 norm of each output unit of `x`, broadcastable against `x`.

    Example:

    >>> x = ops.convert_to_tensor([[3.0, 0.0], [4.0, 1.0]])
    >>> ops.convert_to_numpy(unitwise_norm(x)).tolist()
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

    >>> from keras_gradmon.core.clipping import global_norm_of
    >>> rule = AdaptiveGradientClip(clipping=0.1)
    >>> w = ops.convert_to_tensor([[3.0], [4.0]])
    >>> g = ops.convert_to_tensor([[0.0], [2.0]])
    >>> result = rule.clip([g], [w], global_norm_of([g]), {})
    >>> ops.convert_to_numpy(result.grads[0]).ravel().tolist()  # ||G|| <= 0.5
    [0.0, 0.5]
    """

    name: ClassVar[str] = "agc"
    clipping: float = 0.01
    eps: float = 1e-3

    def __post_init__(self) -> None:
        clipping = validation.positive_finite("clipping", self.clipping)
        object.__setattr__(self, "clipping", clipping)
        object.__setattr__(self, "eps", validation.positive_finite("eps", self.eps))

    def state_spec(self) -> StateSpec:
        return {}

    def clip(
        self,
        grads: list[Any],
        weights: list[Tensor],
        norm: GlobalNorm,
        state: dict[str, Tensor],
    ) -> ClipResult:
        del norm, state  # unit-wise and stateless
        if len(grads) != len(weights):
            raise ValueError(
                "AGC needs one weight per gradient. Received: "
                f"{len(grads)} gradients and {len(weights)} weights"
            )
        clipped = [self._clip_one(g, w) for g, w in zip(grads, weights)]
        after = global_norm_of(clipped)
        post = ops.where(after.finite, after.clamped, float("nan"))
        return ClipResult(clipped, {}, post)

    def _clip_one(self, g: Any, w: Tensor) -> Tensor:
        """The clipped dense gradient `g` of the weight `w`."""
        # Units span rows: a `tf.IndexedSlices` is clipped dense. The
        # weight's static shape stands for a gradient's unknown one.
        g = with_static_shape(backend.densify(g), w.shape)
        if backend.num_elements(g) == 0:
            return g  # no unit to clip
        dtype = compute_dtype(g.dtype)
        g32 = ops.cast(g, dtype)
        w_norm = unitwise_norm(ops.cast(w, dtype))
        scale, relative = _unit_parts(g32)
        g_norm = scale * relative  # Inf past float32: then it clips
        max_norm = self.clipping * ops.maximum(w_norm, self.eps)
        # G * max_norm / ||G||, as (G / scale) * (max_norm / relative):
        # no intermediate overflows, even when ||G|| does not fit.
        floor = _DIV_EPS / scale
        ratio = backend.divide(g32, scale)
        scaled = ratio * (max_norm / ops.maximum(relative, floor))
        return ops.where(g_norm < max_norm, g, ops.cast(scaled, g.dtype))
