"""Fixed-threshold clipping by the global norm of all gradients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from keras import ops

from keras_gradmon import validation
from keras_gradmon.backend import Tensor
from keras_gradmon.core.clipping.base import (
    ClipResult,
    GlobalNorm,
    StateSpec,
    post_clip_norm,
    scale_by_global_norm,
)


@dataclass(frozen=True)
class GlobalNormClip:
    """Scales all gradients by `max_norm / max(global_norm, max_norm)`.

    This is `tf.clip_by_global_norm` (Pascanu et al. 2013): one factor for
    every tensor, so the update keeps its direction. Keras's `clipnorm` and
    tf-agents' `gradient_clipping` are different: they clip each tensor by
    its *own* norm, which changes the direction; Keras's `global_clipnorm`
    is the equivalent of this rule.

    Float32 results are bit-identical to `tf.clip_by_global_norm` given the
    same global norm when it clips; below `max_norm` the input is returned
    untouched. Finite gradients whose float32 norm overflows are clipped
    by their exact norm; a NaN/Inf gradient gives NaN gradients, as in TF.

    Args:
        max_norm: The largest global norm let through.

    Example:

    >>> from keras_gradmon.core.clipping import global_norm_of
    >>> rule = GlobalNormClip(max_norm=1.0)
    >>> g = [ops.convert_to_tensor([3.0, 4.0])]
    >>> result = rule.clip(g, g, global_norm_of(g), {})
    >>> [round(x, 3) for x in ops.convert_to_numpy(result.grads[0]).tolist()]
    [0.6, 0.8]
    >>> float(result.post_norm)
    1.0
    """

    name: ClassVar[str] = "global_norm"
    max_norm: float

    def __post_init__(self) -> None:
        max_norm = validation.positive_finite("max_norm", self.max_norm)
        object.__setattr__(self, "max_norm", max_norm)

    def state_spec(self) -> StateSpec:
        return {}

    def clip(
        self,
        grads: list[Any],
        weights: list[Tensor],
        norm: GlobalNorm,
        state: dict[str, Tensor],
    ) -> ClipResult:
        del weights, state  # stateless, and the threshold ignores the weights
        # `not (norm < max_norm)` rather than `norm >= max_norm`: NaN clips.
        clip = ops.logical_not(norm.clamped < self.max_norm)
        return ClipResult(
            scale_by_global_norm(grads, norm, self.max_norm, clip),
            {},
            post_clip_norm(norm, self.max_norm, clip),
        )
