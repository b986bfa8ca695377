"""AutoClip: clip to a percentile of the recent global gradient norms.

Seetharaman, Wichern, Pardo, Le Roux, "AutoClip: Adaptive Gradient
Clipping for Source Separation Networks", MLSP 2020 (arXiv:2007.14469).
Followed: Algorithm 1 and the authors' `autoclip_gradient` in
github.com/pseeth/autoclip (`autoclip.py`): append the current norm to the
history, then clip by global norm to `np.percentile(history, p)` (linear
interpolation). The history here is a ring buffer of the last `history`
finite norms instead of an unbounded list (like the authors' later
`QuantileClip(history_length=...)`, which however takes the percentile
*before* appending).
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
    post_clip_norm,
    scale_by_global_norm,
)


@dataclass(frozen=True)
class AutoClip:
    """Clips the global norm to the `percentile`-th percentile of its history.

    State: `buffer` (the last `history` finite global norms, a ring) and
    `count` (how many finite norms were ever appended; the write position is
    `count % history`). A non-finite norm is not appended and gives NaN
    gradients, as `tf.clip_by_global_norm` does.

    Args:
        percentile: In [0, 100]; 10 is the paper's recommendation.
        history: How many recent norms the percentile is taken over.

    Example:

    >>> from keras_gradmon.clipping import global_norm_of
    >>> rule = AutoClip(percentile=50.0, history=4)
    >>> state = {"buffer": tf.constant([1.0, 2.0, 0.0, 0.0]),
    ...          "count": tf.constant(2, tf.int64)}
    >>> g = [tf.constant([0.0, 9.0])]
    >>> result = rule.clip(g, g, global_norm_of(g), state)
    >>> float(rule.threshold(result.state)), result.grads[0].numpy().tolist()
    (2.0, [0.0, 2.0])
    """

    name: ClassVar[str] = "autoclip"
    percentile: float = 10.0
    history: int = 1000

    def __post_init__(self) -> None:
        percentile = _validation.in_closed_range(
            "percentile", self.percentile, 0.0, 100.0
        )
        object.__setattr__(self, "percentile", percentile)
        history = _validation.positive_int("history", self.history)
        object.__setattr__(self, "history", history)

    def state_spec(self) -> StateSpec:
        return {
            "buffer": ((self.history,), "float32", 0.0),
            "count": ((), "int64", 0.0),
        }

    def threshold(self, state: dict[str, tf.Tensor]) -> tf.Tensor:
        """The percentile of the valid entries of `state["buffer"]`.

        Linear interpolation between order statistics, as
        `np.percentile(values, percentile, method="linear")`. +inf while the
        buffer is empty.
        """
        buffer = tf.convert_to_tensor(state["buffer"], tf.float32)
        count = tf.convert_to_tensor(state["count"], tf.int64)
        valid = tf.minimum(count, self.history)
        slots = tf.range(self.history, dtype=tf.int64)
        # Invalid slots sort last, so the first `valid` entries are the data.
        ordered = tf.sort(tf.where(slots < valid, buffer, float("inf")))
        last = tf.maximum(valid - 1, 0)
        position = self.percentile * tf.cast(last, tf.float32) / 100.0
        below = tf.minimum(tf.cast(tf.floor(position), tf.int64), last)
        above = tf.minimum(below + 1, last)
        fraction = position - tf.cast(below, tf.float32)
        low = tf.gather(ordered, below)
        high = tf.gather(ordered, above)
        # Exactly `low` when fraction == 0, so a single entry is returned as is.
        return tf.where(fraction > 0, low + (high - low) * fraction, low)

    def clip(
        self,
        grads: list[tf.Tensor],
        weights: list[tf.Tensor],
        norm: GlobalNorm,
        state: dict[str, tf.Tensor],
    ) -> ClipResult:
        del weights  # the threshold depends on the norm history only
        # Finite gradients whose norm overflows float32 enter the history as
        # float32's largest value; NaN/Inf steps do not enter it.
        value = norm.clamped
        finite = norm.finite
        buffer = tf.convert_to_tensor(state["buffer"], tf.float32)
        count = tf.convert_to_tensor(state["count"], tf.int64)
        slots = tf.range(self.history, dtype=tf.int64)
        # A masked write rather than a scatter: cheap, and XLA-friendly.
        write = tf.logical_and(finite, tf.equal(slots, count % self.history))
        new_state = {
            "buffer": tf.where(write, value, buffer),
            "count": count + tf.cast(finite, tf.int64),
        }
        threshold = self.threshold(new_state)
        # Strictly above: a zero norm under a zero threshold (a 0th percentile
        # over a history holding a zero) stays zero instead of 0 * inf = NaN.
        # NaN never compares above: `not finite` clips it (to NaN), as TF.
        clip = tf.logical_or(value > threshold, tf.logical_not(finite))
        return ClipResult(
            scale_by_global_norm(grads, norm, threshold, clip),
            new_state,
            post_clip_norm(norm, threshold, clip),
        )
