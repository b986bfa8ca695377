"""ZClip: clip global-norm spikes detected by a z-score against EMA statistics.

Kumar, Owen, Roy Chowdhury, Güra, "ZClip: Adaptive Spike Mitigation for LLM
Pre-Training", 2025 (arXiv:2504.02507). Followed: the authors' `ZClip` in
github.com/bluorion-com/ZClip (`zclip/zclip.py`, as released in zclip
1.0.0), defaults `mode="zscore", clip_option="adaptive_scaling"`, with
`max_grad_norm=None`, `clip_factor=1` and `skip_update_on_spike=False`:

- warm-up: the first `warmup` norms are collected, not clipped; then
  mean = their mean, var = their population variance (divide by N);
- after it: std = sqrt(var), z = (g - mean) / (std + eps); if z > z_t the
  norm is clipped to mean + z_t * std / (z / z_t) = mean + (z_t**2 / z) std
  ("reciprocal", the authors' "adaptive_scaling"), or, in this module's
  "zscore" mode (the authors' `mode="percentile"`), to mean + z_t * std
  whenever g exceeds it;
- the EMAs are updated with the *clipped* norm g* (g itself if not clipped):
  mean <- a mean + (1 - a) g*, then var <- a var + (1 - a) (g* - mean)**2
  with the *updated* mean, exactly as the reference code does.
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

#: Threshold formulas; see the module docstring.
ZCLIP_MODES: tuple[str, ...] = ("reciprocal", "zscore")


@dataclass(frozen=True)
class ZClip:
    """Clips the global norm when its z-score against EMA statistics spikes.

    State: `count` (finite norms seen; int32 on JAX without
    `jax_enable_x64`), `mean` and `var`. During warm-up
    (`count < warmup`) `mean`/`var` hold the running mean and population
    variance of the norms so far (Welford), which equal the reference's
    buffer statistics once `warmup` norms are in. Non-finite norms leave the
    state untouched and give NaN gradients, as `tf.clip_by_global_norm` does.

    Differences from the reference code: the clipped norm is exactly the
    threshold (the reference divides by `g + 1e-6`), and its optional fixed
    `max_grad_norm` cap is not part of this rule.

    Args:
        alpha: EMA smoothing factor in (0, 1); weight of the old statistics.
        z_threshold: z-score above which a norm is a spike.
        warmup: Number of finite norms used to initialise mean and var.
        eps: Added to the std in the z-score's denominator.
        mode: "reciprocal" (the paper's) or "zscore"; see the module docs.

    Example:

    >>> from keras_gradmon.core.clipping import global_norm_of
    >>> rule = ZClip(warmup=2)
    >>> state = {"count": ops.convert_to_tensor(2, "int64"),
    ...          "mean": ops.convert_to_tensor(1.0), "var": ops.convert_to_tensor(0.01)}
    >>> g = [ops.convert_to_tensor([0.0, 3.0])]  # z = 20: 1 + 2.5**2 / 20 * 0.1
    >>> result = rule.clip(g, g, global_norm_of(g), state)
    >>> round(float(result.grads[0][1]), 5)
    1.03125
    """

    name: ClassVar[str] = "zclip"
    alpha: float = 0.97
    z_threshold: float = 2.5
    warmup: int = 25
    eps: float = 1e-6
    mode: str = "reciprocal"

    def __post_init__(self) -> None:
        values = {
            "alpha": validation.open_unit_interval("alpha", self.alpha),
            "z_threshold": validation.positive_finite("z_threshold", self.z_threshold),
            "warmup": validation.positive_int("warmup", self.warmup),
            "eps": validation.positive_finite("eps", self.eps),
            "mode": validation.one_of("mode", self.mode, ZCLIP_MODES),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def state_spec(self) -> StateSpec:
        return {
            "count": ((), "int64", 0.0),
            "mean": ((), "float32", 0.0),
            "var": ((), "float32", 0.0),
        }

    def _spike(self, norm: Tensor, mean: Tensor, std: Tensor) -> tuple[Tensor, Tensor]:
        """`(is a spike, the threshold to clip it to)` of `mode`."""
        z_t = self.z_threshold
        if self.mode == "reciprocal":
            z = (norm - mean) / (std + self.eps)
            spike = z > z_t
            # z > z_t > 0 wherever the threshold is used; 1 avoids 0 / 0.
            safe_z = ops.where(spike, z, ops.ones_like(z))
            return spike, mean + (z_t * z_t / safe_z) * std
        threshold = mean + z_t * std
        return norm > threshold, threshold

    def clip(
        self,
        grads: list[Any],
        weights: list[Tensor],
        global_norm: GlobalNorm,
        state: dict[str, Tensor],
    ) -> ClipResult:
        del weights  # the threshold depends on the norm history only
        # Finite gradients whose norm overflows float32 count as float32's
        # largest value (a spike); NaN/Inf steps leave the state untouched.
        norm = global_norm.clamped
        finite = global_norm.finite
        count = ops.convert_to_tensor(state["count"], wide_int())
        mean = ops.convert_to_tensor(state["mean"], "float32")
        var = ops.convert_to_tensor(state["var"], "float32")
        warming = count < self.warmup

        # Warm-up: Welford's update of the running mean / population variance.
        n = ops.cast(count + 1, "float32")
        delta = norm - mean
        warm_mean = mean + delta / n
        warm_var = var + (delta * (norm - warm_mean) - var) / n

        # After warm-up: spike detection against the statistics so far.
        spike, threshold = self._spike(norm, mean, ops.sqrt(var))
        after_warmup = ops.logical_and(finite, ops.logical_not(warming))
        spike = ops.logical_and(spike, after_warmup)
        effective = ops.where(spike, threshold, norm)
        alpha = self.alpha
        ema_mean = alpha * mean + (1.0 - alpha) * effective
        ema_var = alpha * var + (1.0 - alpha) * ops.square(effective - ema_mean)

        new_state = {
            "count": count + ops.cast(finite, count.dtype),
            "mean": ops.where(finite, ops.where(warming, warm_mean, ema_mean), mean),
            "var": ops.where(finite, ops.where(warming, warm_var, ema_var), var),
        }
        # A non-finite step gives NaN gradients (spike or not), as TF does.
        return ClipResult(
            scale_by_global_norm(grads, global_norm, threshold, spike),
            new_state,
            post_clip_norm(global_norm, threshold, spike),
        )
