"""Fixed-threshold clipping by the global norm of all gradients."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import tensorflow as tf

from keras_gradmon import _validation
from keras_gradmon.clipping.base import StateSpec, scale_by_global_norm


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
    untouched. A non-finite global norm gives NaN gradients, as in TF.

    Args:
        max_norm: The largest global norm let through.

    Example:

    >>> rule = GlobalNormClip(max_norm=1.0)
    >>> g = [tf.constant([3.0, 4.0])]
    >>> [clipped], _ = rule.clip(g, g, tf.constant(5.0), {})
    >>> [round(x, 3) for x in clipped.numpy().tolist()]
    [0.6, 0.8]
    """

    name: ClassVar[str] = "global_norm"
    max_norm: float

    def __post_init__(self) -> None:
        max_norm = _validation.positive_finite("max_norm", self.max_norm)
        object.__setattr__(self, "max_norm", max_norm)

    def state_spec(self) -> StateSpec:
        return {}

    def clip(
        self,
        grads: list[tf.Tensor],
        weights: list[tf.Tensor],
        global_norm: tf.Tensor,
        state: dict[str, tf.Tensor],
    ) -> tuple[list[tf.Tensor], dict[str, tf.Tensor]]:
        del weights, state  # stateless, and the threshold ignores the weights
        norm = tf.cast(global_norm, tf.float32)
        # `not (norm < max_norm)` rather than `norm >= max_norm`: NaN clips.
        clip = tf.logical_not(norm < self.max_norm)
        return scale_by_global_norm(grads, norm, self.max_norm, clip), {}
