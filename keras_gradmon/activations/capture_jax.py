"""The activation probe on Keras 3's JAX backend: the probe function under
`jax.jit`, a pure function of the model's state values and the probe batch,
run in a `keras.StatelessScope` that maps each variable to its value (as
`model.stateless_call` does), with the watched layers hooked while it traces
(`keras_gradmon.activations.layers`). Later runs are one compiled program.

During `fit` the trainer keeps the live weights in `model._jax_state` (the
variables themselves purged until the epoch ends): the probe reads them
there while the state is ahead of the variables. Imported only on the JAX
backend (`keras_gradmon.activations.probe.capture_backend`); TensorFlow is
never imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import keras

from keras_gradmon import backend

#: The trainer's state keys, in `state_values` order.
_STATE_KEYS = ("trainable_variables", "non_trainable_variables")


def flatten(structure: Any) -> list[Any]:
    """The leaves of a structure of arrays, in `keras.tree` order.

    Example:

    >>> flatten({"b": 2, "a": [1]})
    [1, 2]
    """
    return keras.tree.flatten(structure)


def as_inputs(data: Any) -> Any:
    """The probe batch as JAX arrays (its structure kept).

    Example:

    >>> as_inputs([1.0]).dtype
    dtype('float32')
    """
    return keras.tree.map_structure(jnp.asarray, data)


def state_values(model: Any, given: Any = None) -> list[Any]:
    """The live values of `model`'s trainable, then non-trainable variables
    (in the order of `model.trainable_variables` and
    `model.non_trainable_variables`): `given`, a pair of those lists (a
    hand-written loop's state), else from the trainer's `_jax_state` during
    `fit` while it is ahead of the variables, else the variables'.

    Example:

    >>> len(state_values(model)) == len(model.variables)  # doctest: +SKIP
    True
    """
    if given is not None:
        trainable, non_trainable = given
        return [*trainable, *non_trainable]
    values = []
    for key in _STATE_KEYS:
        held = backend.trainer_values(model, key)
        values.extend(held if held else _values(model, getattr(model, key)))
    return values


def _values(model: Any, variables: list) -> list[Any]:
    """The variables' own values; an error where the trainer purged them."""
    # `_value`: where Keras's JAX trainer purges a variable (`value` would
    # then make a placeholder from the initializer).
    if any(getattr(v, "_value", 0) is None for v in variables):
        raise ValueError(
            f"The variables of {getattr(model, 'name', model)!r} hold no values: "
            "Keras's JAX `fit` keeps them in the trainer's state (of the "
            "model being fit) until the epoch ends. Probe the model passed "
            "to `fit`, or pass `state=` to `update`."
        )
    return [v.value for v in variables]


def _variables(model: Any) -> list[Any]:
    return [v for key in _STATE_KEYS for v in getattr(model, key)]


def compile_probe(
    measure: Callable[[Any], dict], model: Any = None
) -> Callable[[Any, Any], dict]:
    """`measure` (probe batch -> arrays) under `jax.jit`, called as
    `run(data, state)`: on `state` (`(trainable_values,
    non_trainable_values)`), else on the live state of `model`, the model
    whose variables the forward pass reads (`state_values`).

    Raises:
        ValueError: Without `model` (JAX needs the variables' values passed
            in).

    Example:

    >>> run = compile_probe(lambda x: {"y": model(x)}, model)  # doctest: +SKIP
    >>> run(x, None)["y"].shape  # doctest: +SKIP
    (256, 10)
    """
    if model is None:
        raise ValueError(
            "The activation probe on the JAX backend needs the model whose "
            "variables the forward pass reads. Received: model=None"
        )
    compiled: dict[tuple[int, ...], Callable] = {}

    def run(data: Any, state: Any) -> dict:
        variables = _variables(model)
        key = tuple(id(v) for v in variables)
        if key not in compiled:
            compiled[key] = jax.jit(_stateless(measure, variables))
        return compiled[key](state_values(model, state), data)

    return run


def _stateless(measure: Callable[[Any], dict], variables: list) -> Callable:
    """`measure` as a pure function of the variables' values and the batch."""

    def pure(values: list, data: Any) -> dict:
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return measure(data)

    return pure
