"""Which kind of optimizer this is, and so which adapter wraps it. Nothing
is imported here: an optimizer of a library that was never imported cannot
exist, so only the libraries already loaded are asked."""

from __future__ import annotations

import sys
from typing import Any

#: The kinds `wrap` accepts, as the error messages list them.
SUPPORTED = (
    "a Keras 3 optimizer (`keras.optimizers.Adam(...)`), a tf_keras optimizer "
    "(`tf.keras.optimizers.Adam(...)` under TF_USE_LEGACY_KERAS=1, new-style or "
    "`tf.keras.optimizers.legacy`), or a `tf.compat.v1.train.Optimizer` "
    "(`tf.compat.v1.train.AdamOptimizer(...)`)"
)


def kind_of(optimizer: Any) -> str | None:
    """ "keras3", "tf_keras" or "tf_v1", or None for anything else.

    Example:

    >>> kind_of(tf.compat.v1.train.AdamOptimizer(1e-3))  # doctest: +SKIP
    'tf_v1'
    """
    keras = sys.modules.get("keras")
    optimizers = getattr(keras, "optimizers", None)
    if optimizers is not None and isinstance(optimizer, optimizers.Optimizer):
        return "keras3"
    tf_keras = sys.modules.get("tf_keras")
    if tf_keras is not None and isinstance(
        optimizer,
        (tf_keras.optimizers.Optimizer, tf_keras.optimizers.legacy.Optimizer),
    ):
        return "tf_keras"
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(optimizer, tf.compat.v1.train.Optimizer):
        return "tf_v1"
    return None


def unsupported_error(optimizer: Any, argument: str = "optimizer") -> ValueError:
    """The error for an `optimizer` no adapter wraps, naming the `argument`
    it came in."""
    hint = ""
    if isinstance(optimizer, str):
        hint = " (a name: construct the optimizer first)"
    return ValueError(
        f"`{argument}` must be {SUPPORTED}{hint}. Received: {argument}="
        f"{optimizer!r} (of type {type(optimizer).__module__}."
        f"{type(optimizer).__qualname__})"
    )
