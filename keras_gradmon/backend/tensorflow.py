"""The TensorFlow backend: where ops are being traced (XLA or not), a
functional conditional whose untaken branch costs nothing in a graph without
XLA (`gate`), the ops that differ in and out of XLA (exact copies, a row
written into the ring), the library's boundary for AutoGraph, cheap eager
reads of state variables for the training thread, and TensorFlow's
gradients that are not one dense tensor of static shape: a
`tf.IndexedSlices` (an `Embedding`'s gradient) and shapes known only at run
time (their layout is `static_layout`'s, computed with tensors).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
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


#: The backend's conditional (`keras_gradmon.backend.cond`).
cond = gate


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


def values_if(pred: tf.Tensor | bool, variables: list[Any]) -> list[tf.Tensor]:
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

    if pred is True:
        return held()
    return tf.cond(pred, held, lambda: _empty(variables))


def _empty(variables: list[Any]) -> list[tf.Tensor]:
    """What `values_if` gives where its test fails: empty tensors, or, under
    XLA (one static shape), zeros of the variables' shapes."""
    if in_xla_context():
        return [tf.zeros(v.shape, _dtype(v)) for v in variables]
    return [tf.zeros([0] * _rank(v), _dtype(v)) for v in variables]


def update_holding(
    pred: tf.Tensor, fn, store, hold: tf.Tensor | bool, variables: list[Any]
) -> list[tf.Tensor]:
    """`update_if`'s conditional, which also returns `values_if(hold,
    variables)` from its taken branch and `_empty(variables)` from the
    other (a branch returns its outputs, so it is `gate`'s, not `run_if`'s)."""

    def taken() -> list[tf.Tensor]:
        store.write(fn(store.read()))
        return values_if(hold, variables)

    return gate(pred, taken, lambda: _empty(variables))


def _rank(variable: Any) -> int:
    return len(variable.shape)


def _dtype(variable: Any) -> tf.DType:
    return tf.as_dtype(getattr(variable.dtype, "name", variable.dtype))


def densify(t: tf.Tensor | tf.IndexedSlices) -> tf.Tensor:
    """`t` as a dense tensor: `tf.IndexedSlices` with duplicates summed,
    keeping a static dense shape where there is one.

    Example:

    >>> densify(tf.IndexedSlices(tf.ones([2, 1]), [0, 0], [2, 1])).numpy().tolist()
    [[2.0], [0.0]]
    """
    if not isinstance(t, tf.IndexedSlices):
        return tf.convert_to_tensor(t)
    shape = tf.get_static_value(t.dense_shape)
    dense = tf.convert_to_tensor(t)
    return dense if shape is None else tf.reshape(dense, shape)


def num_elements(t: tf.Tensor) -> int | None:
    """`t.shape.num_elements()`: None when known only at run time."""
    return t.shape.num_elements()


def dynamic_layout(
    sizes: Sequence[tf.Tensor], blocks: np.ndarray, min_block: int
) -> tuple:
    """The fields of `keras_gradmon.core.batched.static_layout` for sizes
    known at run time (int32 scalar tensors), computed with tensors: the
    block is `min_block` doubled once per entry of `blocks` at most the
    target.

    Example:

    >>> int(dynamic_layout([tf.constant(5)], np.array([128]), 64)[1])
    64
    """
    count = len(sizes)
    sizes = tf.cast(tf.stack(sizes), tf.int32)
    target = tf.maximum(tf.reduce_sum(sizes) // (4 * count), 1)
    steps = tf.reduce_sum(tf.cast(target >= blocks, tf.int32))
    block = min_block * tf.bitwise.left_shift(1, steps)
    per = -(-sizes // block)
    start = (tf.cumsum(per) - per) * block
    samples = tf.stack([start, start + sizes // 2, start + tf.maximum(sizes - 1, 0)], 1)
    spare = tf.fill(tf.shape(samples), tf.reduce_sum(per) * block)
    samples = tf.where(sizes[:, None] == 0, spare, samples)
    segments = tf.concat([tf.repeat(tf.range(count), per), [count]], 0)
    return count, block, sizes, per * block - sizes, samples, segments


def dynamic_matrix(
    tensors: Sequence[tf.Tensor], dtype: str, blocks: np.ndarray, min_block: int
) -> tuple[tf.Tensor, tuple]:
    """The dense `tensors` as one NaN-padded `[blocks, block]` matrix of
    `dtype`, with a spare all-NaN block, laid out at run time.

    Example:

    >>> dynamic_matrix([tf.ones([3])], "float32", [128], 64)[0].shape  # doctest: +SKIP
    TensorShape([2, 64])
    """
    layout = dynamic_layout([tf.size(t) for t in tensors], blocks, min_block)
    _, block, _, pads, _, _ = layout
    nan, parts = tf.constant(float("nan"), dtype), []
    for i, t in enumerate(tensors):
        # Constants, not tf.pad: XLA then concatenates with plain copies.
        parts += [tf.reshape(tf.cast(t, dtype), [-1]), tf.fill([pads[i]], nan)]
    parts.append(tf.fill([block], nan))
    return tf.reshape(tf.concat(parts, 0), [-1, block]), layout


def bincount(index: tf.Tensor, size: int) -> tf.Tensor:
    """Occurrences of `0 .. size - 1` in `index` (int32): under XLA with an
    op it compiles; outside it with the histogram kernel on the indices as
    floats (each its own unit-wide bucket, exact below 2**24), which takes
    about half of `DenseBincount`'s time there.

    Example:

    >>> bincount(tf.constant([0, 2, 2]), 3).numpy().tolist()
    [1, 0, 2]
    """
    if in_xla_context() or size >= 2**24:
        weights = np.zeros(0, "i4")
        return tf.raw_ops.DenseBincount(input=index, size=size, weights=weights)
    edges = tf.constant([0.0, float(size)])
    return tf.histogram_fixed_width(tf.cast(index, tf.float32), edges, size)


def global_norm(values: Sequence[tf.Tensor]) -> tf.Tensor:
    """`tf.linalg.global_norm(values)`.

    Example:

    >>> float(global_norm([tf.constant([3.0]), tf.constant([4.0])]))
    5.0
    """
    return tf.linalg.global_norm(values)


def divide(x: tf.Tensor, divisor: tf.Tensor) -> tf.Tensor:
    """`x / divisor`."""
    return x / divisor


def unmasked_pays(every_step: bool) -> bool:
    """`keras_gradmon.backend.unmasked_pays`: measuring every step, outside
    XLA."""
    return every_step and not in_xla_context()


def put_row(rows: tf.Tensor, slot: tf.Tensor, row: tf.Tensor) -> tf.Tensor:
    """`backend.put_row`: one scatter outside XLA, where `XlaDynamicUpdateSlice`
    would run through XLA's on-demand compiler at each call."""
    slot = tf.cast(slot, tf.int32)
    if in_xla_context():
        from tensorflow.compiler.tf2xla.python.xla import dynamic_update_slice

        start = [slot] + [0] * (len(rows.shape) - 1)
        return dynamic_update_slice(rows, row[None], start)
    return tf.tensor_scatter_nd_update(rows, tf.reshape(slot, [1, 1]), row[None])


def wide_float() -> str:
    """float64."""
    return "float64"


def state_dtype(dtype: str) -> str:
    """`dtype` itself: TensorFlow has every dtype."""
    return dtype


def update_if(pred: tf.Tensor, fn, store) -> None:
    """`fn`'s results assigned inside the taken branch of `graph.run_if`."""
    run_if(pred, lambda: store.write(fn(store.read())))


def capture(variables, source, cache: dict) -> tuple:
    """Raw eager reads of `variables` (`reading.Reader`, cached by id)."""
    from keras_gradmon.backend.tensorflow import Reader

    readers = [cache.setdefault(id(v), Reader(v)) for v in variables]
    return tuple(read() for read in readers)


def barrier(values: list, step: tf.Tensor) -> list:
    """`exact_copies` under XLA (with a runtime 0 made from `step`); the
    values themselves outside it, where nothing fuses across the
    conditional."""
    if not in_xla_context():
        return list(values)
    zero = tf.cast(tf.less(step, 0), tf.int32)
    return exact_copies(values, zero)


def replicas_in_sync() -> int:
    """`distribute.replicas_in_sync`."""
    from keras_gradmon.backend import distribute

    return distribute.replicas_in_sync()


def replica_sum(values: list) -> list:
    """`distribute.all_reduce_sum`."""
    from keras_gradmon.backend import distribute

    return distribute.all_reduce_sum(values)


class Reader:
    """A cheap eager read of `variable`: the raw `ReadVariableOp` (about 8 us)
    for a plain resource variable, `tf.identity` for anything else (a
    distributed variable). Resolved at the first read, on the host: while
    the state is built, inside the traced step, a Keras variable's `value`
    is a graph tensor. The tensor read is a snapshot: a later assign writes
    a new buffer while a reader holds the old one."""

    def __init__(self, variable: Any) -> None:
        self._variable = variable
        self._read: Callable[[], tf.Tensor] | None = None

    def __call__(self) -> tf.Tensor:
        if self._read is None:
            self._read = self._resolve()
        return self._read()

    def _resolve(self) -> Callable[[], tf.Tensor]:
        from tensorflow.python.ops import gen_resource_variable_ops
        from tensorflow.python.ops.resource_variable_ops import BaseResourceVariable

        variable = self._variable
        inner = getattr(variable, "value", variable)  # a Keras 3 variable's tf one
        # Not a distributed variable: that is no BaseResourceVariable.
        if tf.executing_eagerly() and isinstance(inner, BaseResourceVariable):
            handle, dtype = inner.handle, inner.dtype
            return lambda: gen_resource_variable_ops.read_variable_op(handle, dtype)
        return lambda: tf.identity(variable)


def as_gradient(g: object) -> tf.Tensor | tf.IndexedSlices:
    """`g` as a tensor; a `tf.IndexedSlices` is kept as it is.

    Example:

    >>> as_gradient([1.0, 2.0]).dtype
    tf.float32
    """
    return g if isinstance(g, tf.IndexedSlices) else tf.convert_to_tensor(g)


def map_values(
    g: tf.Tensor | tf.IndexedSlices, fn: Callable[[tf.Tensor], tf.Tensor]
) -> tf.Tensor | tf.IndexedSlices:
    """`fn(g)`; for a `tf.IndexedSlices`, the same slices with `fn(values)`.

    Example:

    >>> s = tf.IndexedSlices(tf.ones([1, 2]), [1], [3, 2])
    >>> map_values(s, lambda v: v * 2.0).values.numpy().tolist()
    [[2.0, 2.0]]
    """
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(fn(g.values), g.indices, g.dense_shape)
    return fn(g)


def with_static_shape(g: tf.Tensor, shape: tf.TensorShape) -> tf.Tensor:
    """Dense `g` with the static `shape` where its own is known only at run
    time (an `Embedding`'s densified gradient inside a `tf.function`).

    Example:

    >>> with_static_shape(tf.ones([2]), tf.TensorShape([2])).shape
    TensorShape([2])
    """
    if g.shape.is_fully_defined():
        return g
    return tf.ensure_shape(g, shape)
