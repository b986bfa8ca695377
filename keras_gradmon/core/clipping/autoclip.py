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
    wide_int,
)


@dataclass(frozen=True)
class AutoClip:
    """Clips the global norm to the `percentile`-th percentile of its history.

    State: `buffer` (the last `history` finite global norms, a ring) and
    `count` (how many finite norms were ever appended; the write position is
    `count % history`; int32 on JAX without `jax_enable_x64`). A non-finite
    norm is not appended and gives NaN gradients, as `tf.clip_by_global_norm`
    does.

    Args:
        percentile: In [0, 100]; 10 is the paper's recommendation.
        history: How many recent norms the percentile is taken over.

    Example:

    >>> from keras_gradmon.core.clipping import global_norm_of
    >>> rule = AutoClip(percentile=50.0, history=4)
    >>> state = {"buffer": ops.convert_to_tensor([1.0, 2.0, 0.0, 0.0]),
    ...          "count": ops.convert_to_tensor(2, "int64")}
    >>> g = [ops.convert_to_tensor([0.0, 9.0])]
    >>> result = rule.clip(g, g, global_norm_of(g), state)
    >>> float(rule.threshold(result.state)), ops.convert_to_numpy(result.grads[0])
    (2.0, array([0., 2.], dtype=float32))
    """

    name: ClassVar[str] = "autoclip"
    percentile: float = 10.0
    history: int = 1000

    def __post_init__(self) -> None:
        percentile = validation.in_closed_range(
            "percentile", self.percentile, 0.0, 100.0
        )
        object.__setattr__(self, "percentile", percentile)
        history = validation.positive_int("history", self.history)
        object.__setattr__(self, "history", history)

    def state_spec(self) -> StateSpec:
        return {
            "buffer": ((self.history,), "float32", 0.0),
            "count": ((), "int64", 0.0),
        }

    def threshold(self, state: dict[str, Tensor]) -> Tensor:
        """The percentile of the valid entries of `state["buffer"]`.

        Linear interpolation between order statistics, as
        `np.percentile(values, percentile, method="linear")`. +inf while the
        buffer is empty.

        Example:

        >>> rule = AutoClip(percentile=50.0, history=3)
        >>> float(rule.threshold({"buffer": ops.convert_to_tensor([1.0, 3.0, 9.0]),
        ...                       "count": ops.convert_to_tensor(2, "int64")}))
        2.0
        """
        buffer, count = self._read(state)
        valid = ops.minimum(count, self.history)
        slots = ops.arange(self.history, dtype=count.dtype)
        # Invalid slots sort last, so the first `valid` entries are the data.
        ordered = ops.sort(ops.where(slots < valid, buffer, float("inf")))
        last = ops.maximum(valid - 1, 0)
        position = self.percentile * ops.cast(last, "float32") / 100.0
        below = ops.minimum(ops.cast(ops.floor(position), count.dtype), last)
        above = ops.minimum(below + 1, last)
        fraction = position - ops.cast(below, "float32")
        low = ops.take(ordered, below)
        high = ops.take(ordered, above)
        # Exactly `low` when fraction == 0, so a single entry is returned as is.
        return ops.where(fraction > 0, low + (high - low) * fraction, low)

    def _read(self, state: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """`(buffer, count)` of `state` as float32 and `wide_int()`."""
        buffer = ops.convert_to_tensor(state["buffer"], "float32")
        return buffer, ops.convert_to_tensor(state["count"], wide_int())

    def clip(
        self,
        grads: list[Any],
        weights: list[Tensor],
        norm: GlobalNorm,
        state: dict[str, Tensor],
    ) -> ClipResult:
        del weights  # the threshold depends on the norm history only
        # Finite gradients whose norm overflows float32 enter the history as
        # float32's largest value; NaN/Inf steps do not enter it.
        value = norm.clamped
        finite = norm.finite
        buffer, count = self._read(state)
        slots = ops.arange(self.history, dtype=count.dtype)
        # A masked write rather than a scatter: cheap, and XLA-friendly.
        write = ops.logical_and(finite, ops.equal(slots, count % self.history))
        new_state = {
            "buffer": ops.where(write, value, buffer),
            "count": count + ops.cast(finite, count.dtype),
        }
        threshold = self.threshold(new_state)
        # Strictly above: a zero norm under a zero threshold (a 0th percentile
        # over a history holding a zero) stays zero instead of 0 * inf = NaN.
        # NaN never compares above: `not finite` clips it (to NaN), as TF.
        clip = ops.logical_or(value > threshold, ops.logical_not(finite))
        return ClipResult(
            scale_by_global_norm(grads, norm, threshold, clip),
            new_state,
            post_clip_norm(norm, threshold, clip),
        )
