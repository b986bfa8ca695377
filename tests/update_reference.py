"""NumPy float64 references of the update/weight ratio: the SGD, Adam and
AdamW steps Keras 3 takes, and the ratios of what they change."""

from __future__ import annotations

import numpy as np

#: `(name, Keras optimizer class name, keyword arguments)` of the optimizers
#: the ratio is checked on.
OPTIMIZERS = [
    ("sgd", "SGD", {"learning_rate": 0.1}),
    ("adam", "Adam", {"learning_rate": 0.01}),
    ("adamw", "AdamW", {"learning_rate": 0.01, "weight_decay": 0.1}),
]


def reference_steps(name: str, weights: list, grads: list[list]) -> list[list]:
    """The weights after each of the steps of `grads` (one list per step),
    in float64, as Keras 3's optimizer `name` computes them."""
    kwargs = dict(OPTIMIZERS[[n for n, _, _ in OPTIMIZERS].index(name)][2])
    lr = kwargs["learning_rate"]
    w = [np.asarray(x, np.float64) for x in weights]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    history = []
    for t, step in enumerate(grads, start=1):
        for i, g in enumerate(step):
            g = np.asarray(g, np.float64)
            if name == "sgd":
                w[i] = w[i] - lr * g
                continue
            if name == "adamw":
                w[i] = w[i] - w[i] * kwargs["weight_decay"] * lr
            m[i] += (g - m[i]) * 0.1
            v[i] += (g * g - v[i]) * 0.001
            alpha = lr * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
            w[i] = w[i] - m[i] * alpha / (np.sqrt(v[i]) + 1e-7)
        history.append([x.copy() for x in w])
    return history


def ratios(before: list, after: list, groups: dict[str, list[int]]) -> dict:
    """`{subject: ||after - before|| / ||before||}` per variable (by index),
    per group and "global"; a variable of weight norm 0 left out."""
    moved = [np.sum((np.float64(a) - b) ** 2) for a, b in zip(after, before)]
    size = [np.sum(np.float64(b) ** 2) for b in before]
    out = {i: np.sqrt(moved[i] / size[i]) for i in range(len(before)) if size[i]}
    for group, rows in {**groups, "global": range(len(before))}.items():
        out[group] = np.sqrt(sum(moved[i] for i in rows) / sum(size[i] for i in rows))
    return out
