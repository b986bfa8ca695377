"""Graph-building helpers the in-step code shares: where ops are being traced
(XLA or not), a conditional whose untaken branch costs nothing, and the
library's boundary for AutoGraph."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf


def unconverted(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, which AutoGraph calls as it is, with everything it calls.

    AutoGraph converts every function that a user's converted function
    calls, unless it belongs to TensorFlow or Keras: a user's `tf.function`
    (written in a file) calling `optimizer.apply_gradients` would convert
    the whole monitor, about 80 functions, in 90% of the tracing time (4 s
    on a 3-layer MLP whose plain step traces in 0.2 s). None of it needs
    conversion: the in-step code has no Python control flow on tensors
    (tf-agents traces it with AutoGraph off). The adapters' entry points are
    wrapped in this; `tests/test_tracing.py` checks that nothing behind them
    is converted.

    Example:

    >>> @unconverted
    ... def step(x):
    ...     return x + 1
    """
    return tf.autograph.experimental.do_not_convert(function)


def in_xla_context() -> bool:
    """Whether ops are being traced into an XLA-compiled function."""
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - private module moved
        return False
    graph = tf.compat.v1.get_default_graph()
    return bool(control_flow_util.GraphOrParentsInXlaContext(graph))


def gate(
    pred: tf.Tensor,
    true_fn: Callable[[], Any],
    false_fn: Callable[[], Any],
) -> Any:
    """`tf.cond` whose untaken branch costs nothing in a (non-XLA) graph.

    In a `tf.function` without XLA, TensorFlow lowers `tf.cond` to
    Switch/Merge, and the executor then visits every op of the untaken
    branch on every step (dead tensors flow through them): with the
    statistics of every variable in the branch, that measured 0.2 ms a step.
    Kept as a functional conditional, only the taken branch runs. Under XLA
    and eagerly, plain `tf.cond` already behaves so.

    Example:

    >>> float(gate(tf.constant(True), lambda: tf.constant(1.0),
    ...            lambda: tf.constant(0.0)))
    1.0
    """
    if tf.executing_eagerly() or in_xla_context():
        return tf.cond(pred, true_fn, false_fn)
    try:
        from tensorflow.python.ops import cond_v2
    except ImportError:  # pragma: no cover - private module moved
        return tf.cond(pred, true_fn, false_fn)
    return cond_v2.indexed_case(
        tf.cast(pred, tf.int32), [false_fn, true_fn], lower_using_switch_merge=False
    )


def run_if(pred: tf.Tensor | bool, fn: Callable[[], None]) -> None:
    """Runs `fn`'s ops where `pred` holds: a bool tensor, or a Python bool
    known when tracing (True: ungated; False: nothing is built)."""
    if isinstance(pred, bool):
        if pred:
            fn()
        return

    def taken() -> tf.Tensor:
        fn()
        return tf.constant(True)

    gate(pred, taken, lambda: tf.constant(False))


_BITS = {2: tf.int16, 4: tf.int32, 8: tf.int64}


def exact_copies(grads: list[Any], zero: tf.Tensor) -> list[Any]:
    """Bit-exact copies of `grads` that XLA cannot simplify away, for the
    monitor to read while the inner optimizer reads the originals.

    Why: XLA:CPU contracts a gradient's last elementwise op into the
    optimizer's update as a fused multiply-add (BatchNorm gamma's
    `g * rsqrt(var + eps)` into Adam's `m + (g - m) * 0.1`), but only while
    every reader of the gradient can take it in; a conditional (the
    monitor's gate) cannot, and the update then rounds twice, one ulp off the
    unwrapped optimizer's. A copy gives the monitor its own reader:
    `bitcast(bits XOR zero)`, where `zero` is a runtime 0 XLA cannot fold.

    Example:

    >>> [c] = exact_copies([tf.constant([1.5])], tf.constant(0))
    >>> c.numpy().tolist()
    [1.5]
    """
    copies = []
    for g in grads:
        if g is None:
            copies.append(None)
        elif isinstance(g, tf.IndexedSlices):
            [values] = exact_copies([g.values], zero)
            copies.append(tf.IndexedSlices(values, g.indices, g.dense_shape))
        else:
            g = tf.convert_to_tensor(g)
            bits = _BITS[g.dtype.size]
            flipped = tf.bitwise.bitwise_xor(tf.bitcast(g, bits), tf.cast(zero, bits))
            copies.append(tf.bitcast(flipped, g.dtype))
    return copies


def values_if(pred: tf.Tensor, variables: list[Any]) -> list[tf.Tensor]:
    """The values of `variables` where `pred` holds, held past later
    updates of the variables (an update then copies the buffer first, as
    TensorFlow does for a value still in use); else empty tensors: no
    weight-sized buffer is held on a step where `pred` is false. Under XLA,
    whose conditionals need one static shape, zeros of the variables'
    shapes (written, not copied, on those steps).

    Example:

    >>> v = tf.Variable([1.0, 2.0])
    >>> [x.shape.as_list() for x in values_if(tf.constant(False), [v])]
    [[0]]
    """

    def held() -> list[tf.Tensor]:
        return [tf.identity(tf.convert_to_tensor(v)) for v in variables]

    def empty() -> list[tf.Tensor]:
        if in_xla_context():
            return [tf.zeros(v.shape, _dtype(v)) for v in variables]
        return [tf.zeros([0] * _rank(v), _dtype(v)) for v in variables]

    return tf.cond(pred, held, empty)


def _rank(variable: Any) -> int:
    return len(variable.shape)


def _dtype(variable: Any) -> tf.DType:
    return tf.as_dtype(getattr(variable.dtype, "name", variable.dtype))
