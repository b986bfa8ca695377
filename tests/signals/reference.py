"""NumPy float64 reference of `keras_gradmon.core.noise_scale`, written
from the paper's formulas (McCandlish et al. 2018, appendix A.1) with
B_small = b and B_big = k b, independently of the module's algebra."""

from __future__ import annotations

import numpy as np


def reference_estimates(part_sq_mean, big_sq, parts, part_size=1.0):
    """(|G|^2, tr(Sigma) / b) of one step, elementwise, NaN where k < 2."""
    small, big = np.float64(part_sq_mean), np.float64(big_sq)
    k, b = np.float64(parts), np.float64(part_size)
    with np.errstate(divide="ignore", invalid="ignore"):
        b_small, b_big = b, k * b
        grad_sq = (b_big * big - b_small * small) / (b_big - b_small)
        trace = (small - big) / (1.0 / b_small - 1.0 / b_big)
    several = k > 1
    return np.where(several, grad_sq, np.nan), np.where(several, trace / b, np.nan)


class ReferenceNoiseScale:
    """The EMAs of the estimates, bias-corrected by hand: a weighted mean
    with weights decay^(n - i) over the n usable steps."""

    def __init__(self, decay: float, batch_size: int | None = None) -> None:
        self.decay, self.batch_size = decay, batch_size
        self.grad_sq, self.trace, self.parts = [], [], None

    def update(self, part_sq_mean, big_sq, parts) -> None:
        grad_sq, trace = reference_estimates(part_sq_mean, big_sq, parts)
        if np.isfinite(grad_sq) and np.isfinite(trace):
            self.grad_sq.append(float(grad_sq))
            self.trace.append(float(trace))
            self.parts = parts

    def _smoothed(self, history: list[float]) -> float:
        if not history:
            return np.nan
        weights = self.decay ** np.arange(len(history))[::-1]
        return float(np.sum(weights * np.asarray(history)) / np.sum(weights))

    def totals(self) -> dict[str, float]:
        grad_sq, part_trace = self._smoothed(self.grad_sq), self._smoothed(self.trace)
        in_parts = part_trace / grad_sq if grad_sq > 0 and part_trace > 0 else np.nan
        size = self.batch_size
        return {
            "batch_ratio": in_parts / self.parts if self.parts else np.nan,
            "b_simple": in_parts * size if size else np.nan,
            "grad_sq": grad_sq,
            "trace": part_trace * (size or 1),
        }
