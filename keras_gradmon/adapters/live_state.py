"""Where host reads find a Keras 3 optimizer's live variables: in the
variables themselves, or, on JAX, where the trainer or a hand-written loop
keeps them (`model._jax_state` during `fit`, the `optimizer_variables` a
`jax.jit` loop threads through `stateless_apply`)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from keras_gradmon import backend


class LiveState:
    """The host side of `GradientMonitorOptimizer`'s state: `use_state`,
    `bind_model` and `read_iterations`. Expects `variables`, `iterations`,
    `built` and `monitor` on the class it is mixed into.

    Example:

    >>> optimizer.bind_model(model)  # doctest: +SKIP
    >>> optimizer.read_iterations()  # doctest: +SKIP
    120
    """

    _live_state: Any = None

    def use_state(self, values: Any) -> None:
        """Where host reads (`write_summaries`, the callbacks, `snapshot()`)
        find this optimizer's live variables, when they are not in its
        variables: on JAX, the `optimizer_variables` a hand-written
        `jax.jit` loop threads through `stateless_apply` (a list in the
        order of `variables`, or a callable returning one; None: the
        variables). `fit` needs nothing: the callbacks read the trainer's
        state.

        Example:

        >>> optimizer.use_state(lambda: opt_vars)  # doctest: +SKIP
        """
        live = values if callable(values) or values is None else (lambda: values)
        self._live_state = live
        if self.built:
            self.monitor.state.source = self._read_live

    def bind_model(self, model: Any) -> None:
        """Reads the live state from `model`'s trainer during `fit` (JAX keeps
        it outside the variables, in `model._jax_state`, until the epoch
        ends); a no-op on TensorFlow."""
        if keras.backend.backend() == "jax":
            from keras_gradmon.adapters import keras3_jax

            self.use_state(keras3_jax.fit_state(model))

    def read_iterations(self) -> int:
        """The inner optimizer's step count, read on the host (from the live
        state on JAX)."""
        live = None if self._live_state is None else self._read_live
        counter, per_step = step_counter(self.inner_optimizer)
        [count] = backend.capture([counter], live, {})
        return int(np.asarray(count)) // per_step

    def _read_live(self, variables: list) -> list:
        live = self._live_state() if self._live_state is not None else None
        if live is None:
            return [v.value for v in variables]
        position = {id(v): k for k, v in enumerate(self.variables)}
        return [live[position[id(v)]] for v in variables]


def step_counter(inner: Any) -> tuple[Any, int]:
    """`(variable, k)`: the variable that counts `inner`'s steps, and what
    divides it into `inner.iterations`. Under gradient accumulation
    `iterations` is computed, not a variable: the micro-step count
    (`_iterations`) divided by k; else it is the counter itself (k = 1).

    Example:

    >>> step_counter(keras.optimizers.SGD())[1]
    1
    """
    accumulation = getattr(inner, "gradient_accumulation_steps", None)
    if accumulation:
        return inner._iterations, int(accumulation)
    return inner.iterations, 1
