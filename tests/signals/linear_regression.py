"""A synthetic linear regression whose gradient noise scale is known in
closed form (derived in docs/noise_scale.md).

x ~ N(0, I_d), y = x . w* + eps with eps ~ N(0, s^2), per-example loss
1/2 (x . w - y)^2 at a FIXED w with |w - w*| = r:

    G = w - w*,   |G|^2 = r^2,   tr(Sigma) = d (r^2 + s^2) + r^2,
    B_simple = tr(Sigma) / |G|^2 = d + 1 + d s^2 / r^2.

Keras's "mse" loss, mean (x . w - y)^2, doubles every gradient: |G|^2 and
tr(Sigma) are 4 times the above, B_simple is the same. For an end-to-end
check, fit `problem.model()` on `problem.dataset(n)` with the weights held
fixed (`keras.optimizers.SGD(learning_rate=0.0)`): B_simple depends on w.

Example:

>>> problem = LinearRegression(dim=4, noise_std=1.0, distance=1.0)
>>> problem.b_simple
9.0
>>> x, y = problem.dataset(1024)
>>> x.shape, y.shape
((1024, 4), (1024, 1))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LinearRegression:
    """The problem: dimension d, label noise s, distance r = |w - w*|; `seed`
    draws w* and the direction of w - w*."""

    dim: int
    noise_std: float
    distance: float
    seed: int = 0

    @property
    def target(self) -> np.ndarray:
        """w*, float64, shape (d,)."""
        return np.random.default_rng(self.seed).normal(size=self.dim)

    @property
    def weights(self) -> np.ndarray:
        """The fixed w, float64, shape (d,): w* + r u, u a random unit vector."""
        direction = np.random.default_rng(self.seed + 1).normal(size=self.dim)
        return self.target + self.distance * direction / np.linalg.norm(direction)

    @property
    def grad_sq(self) -> float:
        """|G|^2 for the loss 1/2 (x . w - y)^2."""
        return self.distance**2

    @property
    def trace(self) -> float:
        """tr(Sigma) per example for the loss 1/2 (x . w - y)^2."""
        r2, s2 = self.distance**2, self.noise_std**2
        return self.dim * (r2 + s2) + r2

    @property
    def b_simple(self) -> float:
        """B_simple in examples (the same for any scale of the loss)."""
        return self.trace / self.grad_sq

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]):
        """`(x, y)` in float64: x of shape `shape + (d,)`, y of `shape`."""
        x = rng.normal(size=(*shape, self.dim))
        noise = self.noise_std * rng.normal(size=shape)
        return x, x @ self.target + noise

    def gradients(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-example gradients of 1/2 (x . w - y)^2 at w, float64:
        x (x . w - y), of x's shape."""
        return x * (x @ self.weights - y)[..., None]

    def dataset(self, examples: int, seed: int = 0):
        """`(x, y)` in float32 for `model.fit`, y of shape (examples, 1)."""
        x, y = self.sample(np.random.default_rng(seed), (examples,))
        return x.astype("float32"), y[:, None].astype("float32")

    def model(self):
        """A Keras model computing x . w (one Dense unit, no bias), built
        with the fixed w as its kernel."""
        import keras

        model = keras.Sequential(
            [keras.Input((self.dim,)), keras.layers.Dense(1, use_bias=False)]
        )
        model.layers[0].kernel.assign(self.weights[:, None].astype("float32"))
        return model


def empirical_b_simple(problem: LinearRegression, x: np.ndarray, y: np.ndarray):
    """B_simple of a finite data set at the problem's w, from its exact
    per-example gradients (float64); y of shape (n,) or (n, 1)."""
    grads = problem.gradients(np.float64(x), np.float64(y).reshape(len(x)))
    mean = grads.mean(axis=0)
    return float(np.sum(grads.var(axis=0)) / np.sum(mean**2))
