"""The gradient of `tests.helpers.mlp` under `tests.helpers.LOSS`, in NumPy
float64: the reference the distributed runs are checked against."""

from __future__ import annotations

import numpy as np


def mlp_gradients(weights: list, x, y) -> list[np.ndarray]:
    """Gradients of the mean softmax cross-entropy of the two-layer MLP
    (Dense relu, Dense logits) over the whole batch `x, y`.

    Args:
        weights: `[hidden kernel, hidden bias, head kernel, head bias]`, as
            `model.get_weights()` returns them.
        x: `[n, features]` inputs.
        y: `[n]` integer labels.

    Returns:
        The gradients, in the order of `weights`, as float64 arrays.
    """
    w1, b1, w2, b2 = (np.asarray(w, np.float64) for w in weights)
    x = np.asarray(x, np.float64)
    pre = x @ w1 + b1
    hidden = np.maximum(pre, 0.0)
    logits = hidden @ w2 + b2
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    d_logits = probs
    d_logits[np.arange(len(y)), np.asarray(y)] -= 1.0
    d_logits /= len(y)
    d_hidden = (d_logits @ w2.T) * (pre > 0)
    return [x.T @ d_hidden, d_hidden.sum(0), hidden.T @ d_logits, d_logits.sum(0)]


def global_norm(grads: list) -> float:
    """L2 norm of all elements of `grads`, in float64."""
    return float(np.sqrt(sum(np.sum(np.square(g, dtype=np.float64)) for g in grads)))
