"""The JAX backend: `jax.lax.cond`, and everything else static (JAX arrays
have static shapes; there is no sparse gradient to densify)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.extend
import jax.numpy as jnp
import keras
import numpy as np
from keras import ops

__all__ = [
    "Aside",
    "LeanStep",
    "barrier",
    "bincount",
    "capture",
    "cond",
    "densify",
    "global_norm",
    "lean_train_function",
    "num_elements",
    "on_accelerator",
    "update_if",
]


def cond(
    pred: jax.Array, true_fn: Callable[[], Any], false_fn: Callable[[], Any]
) -> Any:
    """`jax.lax.cond(pred, true_fn, false_fn)`: under `jax.jit` only the taken
    branch runs.

    Example:

    >>> float(cond(jnp.array(True), lambda: jnp.ones(()), lambda: jnp.zeros(())))
    1.0
    """
    return jax.lax.cond(pred, true_fn, false_fn)


def densify(t: Any) -> jax.Array:
    """`t` as a JAX array.

    Example:

    >>> densify([1.0]).shape
    (1,)
    """
    return ops.convert_to_tensor(t)


def num_elements(t: jax.Array) -> int:
    """The number of elements of `t` (always static).

    Example:

    >>> num_elements(jnp.ones([2, 3]))
    6
    """
    return math.prod(t.shape)


def bincount(index: jax.Array, size: int) -> jax.Array:
    """Occurrences of `0 .. size - 1` in `index`, as int32.

    Example:

    >>> bincount(jnp.array([0, 2, 2]), 3).tolist()
    [1, 0, 2]
    """
    return jnp.bincount(index, length=size).astype(jnp.int32)


def global_norm(values: Sequence[jax.Array]) -> jax.Array:
    """sqrt of the sum of every element's square, in the values' dtype.

    Example:

    >>> float(global_norm([jnp.array([3.0]), jnp.array([4.0])]))
    5.0
    """
    return ops.sqrt(ops.sum(ops.stack([ops.sum(ops.square(v)) for v in values])))


def divide(x: jax.Array, divisor: jax.Array) -> jax.Array:
    """`x / divisor`, `divisor` broadcast over the finite `x`, rounded once.

    XLA turns a division by a broadcast into a multiplication by the
    reciprocal: rounded twice, and zero for a divisor above 2**126. A
    divisor of `x`'s own shape (`x * 0` added: 0, as `x` is finite) keeps
    the division.

    Example:

    >>> float(divide(jnp.full([1, 2], 3e38), jnp.full([1, 1], 3e38))[0, 0])
    1.0
    """
    return x / (divisor + x * 0.0)


def unmasked_pays(every_step: bool) -> bool:
    """`keras_gradmon.backend.unmasked_pays`: measuring every step."""
    return every_step


def put_row(rows: jax.Array, slot: Any, row: jax.Array) -> jax.Array:
    """`backend.put_row`: a dynamic update slice."""
    start = (jnp.asarray(slot, jnp.int32),) + (0,) * (rows.ndim - 1)
    return jax.lax.dynamic_update_slice(rows, row[None], start)


def wide_float() -> str:
    """float64 where `jax_enable_x64` is on, else float32.

    Example:

    >>> wide_float() in ("float32", "float64")
    True
    """
    return "float64" if jax.config.jax_enable_x64 else "float32"


def state_dtype(dtype: str) -> str:
    """int32 for int64 without `jax_enable_x64`, else `dtype`.

    Example:

    >>> state_dtype("float32")
    'float32'
    """
    if dtype == "int64" and not jax.config.jax_enable_x64:
        return "int32"
    return dtype


def update_if(pred: jax.Array, fn: Callable[[dict], dict], store: Any) -> None:
    """`store.write(lax.cond(pred, fn, identity, store.read()))`: the
    branches return the state; nothing is assigned inside them."""
    values = store.read()
    store.write(jax.lax.cond(pred, fn, lambda v: v, values))


def barrier(values: list, step: Any) -> list:
    """`lax.optimization_barrier` of the arrays of `values` (None kept).

    Example:

    >>> barrier([None, jnp.ones(2)], 0)[1].tolist()
    [1.0, 1.0]
    """
    present = [v for v in values if v is not None]
    copies = iter(jax.lax.optimization_barrier(present))
    return [None if v is None else next(copies) for v in values]


def values_if(pred: Any, variables: list) -> list:
    """The variables' values: JAX's optimizers return new values rather than
    update in place, so nothing needs holding.

    Example:

    >>> values_if(True, [])
    []
    """
    del pred
    return [jnp.asarray(v) for v in variables]


def update_holding(
    pred: Any, fn: Callable, store: Any, hold: Any, variables: list
) -> list:
    """`update_if`, and the variables' values (`values_if`: JAX holds values,
    nothing is gated)."""
    update_if(pred, fn, store)
    return values_if(hold, variables)


def replicas_in_sync() -> int:
    """1: Keras on JAX distributes by sharding, not replicas of a step.

    Example:

    >>> replicas_in_sync()
    1
    """
    return 1


def replica_sum(values: list) -> list:
    """`values`, as they are (one replica).

    Example:

    >>> replica_sum([None])
    [None]
    """
    return list(values)


@jax.jit
def _pack(arrays: list[jax.Array]) -> jax.Array:
    """Every array's bytes, flat, in one uint8 buffer."""
    parts = [jax.lax.bitcast_convert_type(a, jnp.uint8).reshape(-1) for a in arrays]
    return jnp.concatenate(parts)


class Captured(Sequence):
    """Arrays captured for the host with one device-to-host transfer: packed
    on the device into one buffer whose copy starts at once
    (`copy_to_host_async`); the first item read waits for it and unpacks
    every array as NumPy. A lone array is copied instead.

    Example:

    >>> captured = Captured([jnp.arange(3), jnp.ones([2])])
    >>> captured[0].tolist(), captured[1].tolist()
    ([0, 1, 2], [1.0, 1.0])
    >>> Captured([jnp.arange(2)])[0].tolist()
    [0, 1]
    """

    def __init__(self, arrays: Sequence[jax.Array]) -> None:
        # Reshaped inside `_pack`: an eager reshape is a dispatch of its own
        # (three of them took most of a capture's 0.5 ms).
        arrays = [a if isinstance(a, jax.Array) else jnp.asarray(a) for a in arrays]
        self._specs = [(a.shape, np.dtype(a.dtype)) for a in arrays]
        # A lone array (a step count) is copied, not packed: no `_pack` to
        # compile for its shape (20-45 ms each, in a first fit's time).
        if len(arrays) == 1:
            self._buffer = jax.device_put(arrays[0], may_alias=False)
        else:
            self._buffer = _pack(arrays)
        self._buffer.copy_to_host_async()
        self._host: list[np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self._specs)

    def __getitem__(self, index):  # type: ignore[override]
        if self._host is None:
            raw = np.asarray(self._buffer)
            self._host = [raw] if len(self._specs) == 1 else self._unpack(raw)
        return self._host[index]

    def _unpack(self, raw: np.ndarray) -> list[np.ndarray]:
        arrays, start = [], 0
        for shape, dtype in self._specs:
            size = math.prod(shape) * dtype.itemsize
            arrays.append(raw[start : start + size].view(dtype).reshape(shape))
            start += size
        return arrays


#: How many times a capture looks again for live values that the train
#: step donated between the look and the copy.
_LOOKS = 8


def capture(variables: Sequence[Any], source: Callable | None, cache: dict) -> Captured:
    """The live values of `variables` (from `source`, else the variables'
    own), with one asynchronous host transfer (`Captured`). Read off the
    training thread (Keras's asynchronous batch hooks), the values found may
    be donated to the next step before they are copied: then the newer ones
    are read."""
    for look in range(_LOOKS):
        values = (
            source(variables) if source is not None else [v.value for v in variables]
        )
        try:
            return Captured(values)
        except RuntimeError as error:  # "Array has been deleted"
            if "deleted" not in str(error) or look == _LOOKS - 1:
                raise
    raise AssertionError("unreachable")


class _Trace(NamedTuple):
    """One trace of a train step: its jaxpr, the trees of its inputs and
    outputs, and the `(shape, dtype)` of each input leaf."""

    jaxpr: Any
    in_tree: Any
    out_tree: Any
    avals: list


def _trace(step: Callable, state: Sequence, data: Any) -> _Trace:
    """`step(state, data)` traced (`jax.make_jaxpr`), not compiled."""
    closed, shapes = jax.make_jaxpr(step, return_shape=True)(state, data)
    avals = [(a.shape, a.dtype) for a in closed.in_avals]
    in_tree = jax.tree.structure((state, data))
    return _Trace(closed, in_tree, jax.tree.structure(shapes), avals)


def _held(trace: _Trace, state: Sequence) -> dict[int, Any]:
    """`{position: shape}` of the optimizer variables (`state[2]`) held: an
    input read by no equation and returned at its own place in the state,
    and nowhere else."""
    jaxpr = trace.jaxpr.jaxpr
    read = {id(var) for eqn in jaxpr.eqns for var in eqn.invars}
    returned = [id(var) for var in jaxpr.outvars]
    inputs = jax.tree.unflatten(trace.in_tree, range(len(jaxpr.invars)))
    outputs = jax.tree.unflatten(trace.out_tree, range(len(returned)))
    try:
        places = outputs[1][2]  # (logs, state): the optimizer variables
    except (IndexError, KeyError, TypeError):
        return {}
    if len(places) != len(state[2]):
        return {}
    held = {}
    for i, (value, place) in enumerate(zip(state[2], places)):
        var = jaxpr.invars[inputs[0][2][i]]
        untouched = jaxpr.outvars[place] is var and returned.count(id(var)) == 1
        if untouched and id(var) not in read:
            held[i] = jax.ShapeDtypeStruct(value.shape, value.dtype)
    return held


class LeanStep:
    """`jax.jit(step, donate_argnums=0)` for a train step of Keras's JAX
    trainer, `step(state, data) -> (logs, state)` with `state` its four
    lists (trainable, non-trainable, optimizer and metrics variables), but
    without the optimizer variables the step neither reads nor changes
    (found from its jaxpr at the first call): those stay on the host's
    side and go back into the state as they came. A program called every
    step pays for each array it takes and gives back (about 0.9 us each a
    call on CPU): the monitor's state, on a step that measures nothing.
    The program is compiled from that first call's jaxpr (Keras's code is
    traced once), and traced anew for inputs of other shapes.

    Example:

    >>> lean = LeanStep(model.train_step)  # doctest: +SKIP
    >>> logs, state = lean(state, data)  # doctest: +SKIP
    """

    def __init__(self, step: Callable) -> None:
        self._step = step
        self._full = jax.jit(step, donate_argnums=0)
        self._lean = jax.jit(self._without_held, donate_argnums=0)
        self._trace: _Trace | None = None
        #: `{position: shape}` of the held optimizer variables; None before
        #: the first call.
        self.held: dict[int, Any] | None = None

    def __call__(self, state: Sequence, data: Any) -> tuple:
        if self.held is None:
            self._find_held(state, data)
        if not self.held:
            return self._full(state, data)
        trainable, non_trainable, optimizer, metrics = state
        kept = self._kept(optimizer)
        logs, (trainable, non_trainable, kept, metrics) = self._lean(
            (trainable, non_trainable, kept, metrics), data
        )
        return logs, (trainable, non_trainable, self._merged(kept, optimizer), metrics)

    def lower(self, state: Sequence, data: Any) -> Any:
        """The program a call with `state` and `data` (arrays or
        `jax.ShapeDtypeStruct`s) runs, traced and lowered, not run: once
        its `compile()` is done, a call with arrays of those shapes
        compiles nothing (JAX caches the trace, the lowering and the
        executable)."""
        if self.held is None:
            self._find_held(state, data)
        if not self.held:
            return self._full.lower(state, data)
        trainable, non_trainable, optimizer, metrics = state
        lean = (trainable, non_trainable, self._kept(optimizer), metrics)
        return self._lean.lower(lean, data)

    def _find_held(self, state: Sequence, data: Any) -> None:
        trace = _trace(self._step, state, data)
        self._trace, self.held = trace, _held(trace, state)

    def _without_held(self, state: Sequence, data: Any) -> tuple:
        trainable, non_trainable, kept, metrics = state
        # Placeholders no equation reads (`_held`): XLA drops them.
        zeros = {i: jnp.zeros(s.shape, s.dtype) for i, s in self.held.items()}
        full = (trainable, non_trainable, self._merged(kept, zeros), metrics)
        logs, (trainable, non_trainable, optimizer, metrics) = self._replay(full, data)
        return logs, (trainable, non_trainable, self._kept(optimizer), metrics)

    def _replay(self, state: Sequence, data: Any) -> tuple:
        """The step on tracers: the first call's jaxpr where the shapes are
        the same, else the step traced anew."""
        leaves = jax.tree.leaves((state, data))
        trace = self._trace
        if trace is None or [(x.shape, x.dtype) for x in leaves] != trace.avals:
            return self._step(state, data)
        outputs = jax.extend.core.jaxpr_as_fun(trace.jaxpr)(*leaves)
        return jax.tree.unflatten(trace.out_tree, outputs)

    def _kept(self, optimizer: Sequence) -> list:
        return [v for i, v in enumerate(optimizer) if i not in self.held]

    def _merged(self, kept: Sequence, held: Any) -> list:
        """The optimizer variables: `kept` in order, `held[i]` at each held
        position `i`."""
        rest = iter(kept)
        size = len(kept) + len(self.held)
        return [held[i] if i in self.held else next(rest) for i in range(size)]


def lean_train_function(model: Any, step: Callable) -> Callable | None:
    """`model`'s train function as Keras's JAX trainer makes it
    (`make_train_function`), over a `LeanStep` of `step` (its attribute
    `lean_step`); None where Keras would not `jax.jit` the step alone
    (eager, no `jit_compile`, a distribution, Flax NNX)."""
    if model.run_eagerly or not model.jit_compile:
        return None
    if keras.distribution.distribution() is not None:
        return None
    if keras.config.is_nnx_enabled() or not hasattr(model, "_make_function"):
        return None
    lean = LeanStep(step)
    function = model._make_function(lean)
    function.lean_step = lean  # what it runs, for inspection
    return function


def on_accelerator() -> bool:
    """Whether JAX computes on an accelerator (its default backend is not
    the CPU).

    Example:

    >>> on_accelerator() in (True, False)
    True
    """
    return jax.default_backend() != "cpu"


def _shapes(tree: Any) -> Any:
    """`tree` with each array as its `jax.ShapeDtypeStruct`; None where a
    leaf is no array (nothing is then compiled aside)."""
    try:
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)
    except (AttributeError, TypeError):
        return None


class _Drawn(Iterator):
    """The batches of one call of a train function, keeping the shapes of
    the first one drawn."""

    def __init__(self, batches: Iterator) -> None:
        self._batches = batches
        self.shapes: Any = None

    def __next__(self) -> Any:
        data = next(self._batches)
        if self.shapes is None:
            self.shapes = _shapes(data)
        return data


class Aside:
    """Compiles train functions made over `LeanStep`s on a thread of their
    own, as a tiered JIT compiles its optimized code: for the shapes of one
    call (`watch`) of the train function that runs meanwhile. The thread
    holds `tracing` while it traces (Keras's and the monitor's Python, which
    a train function's first call for new shapes also runs: the caller holds
    it around such calls), not while XLA compiles. An error there is kept
    (`error`), not raised: the function's own first call then traces and
    compiles it, as without this, and raises what it raises.

    Example:

    >>> aside = Aside([idle, due])  # doctest: +SKIP
    >>> logs, state = measuring(*aside.watch((state, batches)))  # doctest: +SKIP
    >>> aside.ready()  # doctest: +SKIP
    False
    """

    def __init__(self, functions: Sequence[Any]) -> None:
        #: The `LeanStep` of each function (made by `lean_train_function`).
        self._steps = [f.lean_step for f in functions]
        self._example: tuple | None = None
        self._thread: threading.Thread | None = None
        #: Held while a train step is traced on the thread.
        self.tracing = threading.Lock()
        #: What the thread raised, if anything.
        self.error: Exception | None = None

    def watch(self, args: tuple) -> tuple:
        """`args` of a train function's call `(state, batches)`, the batches
        drawn through a proxy that keeps the first one's shapes (what the
        thread compiles for); any other `args` as they are."""
        if len(args) != 2 or not isinstance(args[1], Iterator):
            return args
        drawn = _Drawn(args[1])
        self._example = (_shapes(args[0]), drawn)
        return args[0], drawn

    def ready(self) -> bool:
        """Whether every function is compiled (or failed to be): starts the
        thread at the first ask. True at once where no call was `watch`ed
        (nothing to compile for: each function's first call compiles it)."""
        if self._thread is None:
            example, self._example = self._example, None  # not the batches
            if example is None or example[0] is None or example[1].shapes is None:
                return True
            state, drawn = example
            self._thread = threading.Thread(
                target=self._compile,
                args=(state, drawn.shapes),
                name="keras_gradmon-compile",
                daemon=False,  # Python's exit waits for XLA, not the reverse
            )
            self._thread.start()
        return not self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Waits for the thread (if started)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _compile(self, state: Any, data: Any) -> None:
        try:
            for step in self._steps:
                with self.tracing:
                    lowered = step.lower(state, data)
                lowered.compile()  # XLA's part: the training thread runs on
        except Exception as error:  # the function's first call redoes it
            self.error = error
