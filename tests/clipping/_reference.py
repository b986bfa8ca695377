"""NumPy float64 references of the published clipping formulas, and helpers
(in `keras.ops`: tests/jax/test_clipping.py uses them on the JAX backend)."""

from __future__ import annotations

import numpy as np
from keras import ops

from keras_gradmon import backend
from keras_gradmon.core.clipping.base import GlobalNorm, wide_int
from tests.conftest import compile_fn


def initial_state(rule) -> dict:
    """State tensors as the caller creates them from `rule.state_spec()`
    (int64 counters in `wide_int()`: int32 on JAX without x64)."""
    state = {}
    for name, (shape, dtype, value) in rule.state_spec().items():
        dtype = wide_int() if dtype == "int64" else dtype
        state[name] = ops.cast(ops.full(shape, value), dtype)
    return state


def given_norm(norm) -> GlobalNorm:
    """A `GlobalNorm` of the given float32 value (its elements finite iff it
    is): what the rules read, for tests that feed a sequence of norms."""
    norm = ops.cast(norm, "float32")
    exact = ops.cast(norm, backend.wide_float())
    return GlobalNorm(norm, exact, ops.isfinite(norm))


def clipped(rule, grads, weights, norm, state):
    """`rule.clip` with a given norm, as `(grads, new state)`."""
    result = rule.clip(grads, weights, given_norm(norm), state)
    return result.grads, result.state


def compiled_clip(rule, mode):
    """`clipped` run eagerly, in tf.function or under XLA (see `mode`)."""
    return compile_fn(lambda g, w, n, s: clipped(rule, g, w, n, s), mode)


def global_norm64(grads) -> float:
    """L2 norm of all elements, in float64."""
    return float(np.sqrt(sum(np.sum(np.float64(g) ** 2) for g in grads)))


def with_norm(rng: np.random.Generator, shape, norm: float) -> np.ndarray:
    """A float32 tensor of `shape` whose L2 norm is `norm` (NaN/Inf: one entry)."""
    x = rng.standard_normal(shape)
    if not np.isfinite(norm):
        x = x.ravel()
        x[0] = norm
        return x.reshape(shape).astype(np.float32)
    return (x / np.linalg.norm(x) * norm).astype(np.float32)


def global_norm_clip(grads, max_norm: float, norm: float | None = None):
    """Pascanu et al.: g * max_norm / max(||g||, max_norm)."""
    norm = global_norm64(grads) if norm is None else norm
    return [np.float64(g) * (max_norm / max(norm, max_norm)) for g in grads]


def autoclip(norms, percentile: float, history: int):
    """Seetharaman et al. Algorithm 1 with a list history of the last norms.

    Yields (threshold, scale, history length) per step: the norm is appended
    (if finite), then threshold = np.percentile(history, percentile) and the
    gradients are multiplied by min(1, threshold / norm).
    """
    kept: list[float] = []
    for norm in norms:
        if np.isfinite(norm):
            kept = [*kept, float(norm)][-history:]
        if not kept:
            yield np.inf, np.nan, 0
            continue
        threshold = float(np.percentile(kept, percentile, method="linear"))
        if not np.isfinite(norm):
            scale = np.nan
        else:  # a zero gradient stays zero, whatever the threshold
            scale = min(1.0, threshold / norm) if norm > 0 else 1.0
        yield threshold, scale, len(kept)


def zclip(norms, alpha, z_threshold, warmup, eps, mode="reciprocal"):
    """The authors' ZClip.step loop (bluorion-com/ZClip), non-finite skipped.

    Yields (mean, var, clipped norm) after each step; mean/var are None
    until the warm-up buffer is full.
    """
    buffer: list[float] = []
    mean = var = None
    for norm in norms:
        if not np.isfinite(norm):
            yield mean, var, np.nan
            continue
        if mean is None:
            buffer.append(norm)
            if len(buffer) >= warmup:
                mean = sum(buffer) / len(buffer)
                var = sum((x - mean) ** 2 for x in buffer) / len(buffer)
            yield mean, var, norm
            continue
        std = var**0.5
        clip_val = None
        if mode == "zscore":  # the authors' mode="percentile"
            if norm > mean + z_threshold * std:
                clip_val = mean + z_threshold * std
        else:
            z = (norm - mean) / (std + eps)
            if z > z_threshold:
                clip_val = mean + z_threshold * std / (z / z_threshold)
        effective = norm if clip_val is None else clip_val
        mean = alpha * mean + (1 - alpha) * effective
        var = alpha * var + (1 - alpha) * (effective - mean) ** 2
        yield mean, var, effective


def unitwise_norm(x: np.ndarray) -> np.ndarray:
    """deepmind-research nfnets/optim.py `unitwise_norm` (+ rank 5 as Conv3D)."""
    x = np.float64(x)
    if np.squeeze(x).ndim <= 1:
        axis, keepdims = None, False
    elif x.ndim in (2, 3):
        axis, keepdims = 0, True
    elif x.ndim == 4:
        axis, keepdims = (0, 1, 2), True
    else:
        axis, keepdims = tuple(range(x.ndim - 1)), True
    return np.sum(x**2, axis=axis, keepdims=keepdims) ** 0.5


def agc(grad, weight, clipping: float, eps: float) -> np.ndarray:
    """nfnets/optim.py `SGD_AGC.update_param`'s clipping step."""
    grad = np.float64(grad)
    param_norm = np.maximum(unitwise_norm(weight), eps)
    grad_norm = unitwise_norm(grad)
    max_norm = param_norm * clipping
    clipped = grad * (max_norm / np.maximum(grad_norm, 1e-6))
    return np.where(grad_norm > max_norm, clipped, grad)
