"""What differs between Keras backends, in one small module per framework.

The statistics kernel (`keras_gradmon.core.batched`) is written in `keras.ops`;
what `keras.ops` cannot say the same way on every backend lives here: a
conditional whose untaken branch costs nothing, densifying and sizing the
inputs (TensorFlow's `tf.IndexedSlices` and shapes known only at run time),
counting integers into bins, the framework's own global norm, and the widest
float it computes in. Each function dispatches on `keras.backend.backend()`
and imports its framework only when called, so on JAX `tensorflow` is never
imported.

Example:

>>> from keras import ops
>>> float(cond(ops.convert_to_tensor(True), lambda: ops.ones(()),
...            lambda: ops.zeros(())))
1.0
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import keras

#: A tensor of the current backend (`tf.Tensor`, `jax.Array`).
Tensor = Any

_MODULES = {"tensorflow": "tensorflow", "jax": "jax"}
_LOADED: dict[str, ModuleType] = {}


def current() -> ModuleType:
    """The module of the current Keras backend.

    Raises:
        NotImplementedError: for a backend other than TensorFlow or JAX.

    Example:

    >>> current().__name__.rsplit(".", 1)[-1] in ("tensorflow", "jax")
    True
    """
    name = keras.backend.backend()
    module = _LOADED.get(name)
    if module is not None:
        # No import call in traced code: AutoGraph would try to convert it.
        return module
    if name not in _MODULES:
        raise NotImplementedError(
            f"keras_gradmon computes statistics on the backends "
            f"{sorted(_MODULES)}. Received: keras.backend.backend()={name!r}"
        )
    module = importlib.import_module(f"keras_gradmon.backend.{_MODULES[name]}")
    _LOADED[name] = module
    return module


def cond(pred: Tensor, true_fn: Callable[[], Any], false_fn: Callable[[], Any]) -> Any:
    """`true_fn()` where the boolean scalar `pred` holds, else `false_fn()`: a
    real conditional (only the taken branch runs), both branches returning
    the same structure of tensors.

    Example:

    >>> from keras import ops
    >>> float(cond(ops.convert_to_tensor(False), lambda: ops.ones(()),
    ...            lambda: ops.zeros(())))
    0.0
    """
    return current().cond(pred, true_fn, false_fn)


def densify(t: Any) -> Tensor:
    """`t` as a dense tensor of the backend (TensorFlow's `tf.IndexedSlices`
    with duplicate indices summed, keeping a static shape where known).

    Example:

    >>> tuple(densify([1.0, 2.0]).shape)
    (2,)
    """
    return current().densify(t)


def num_elements(t: Tensor) -> int | None:
    """The number of elements of dense `t`, None where known only at run time.

    Example:

    >>> num_elements(densify([[1.0, 2.0]]))
    2
    """
    return current().num_elements(t)


def dynamic_matrix(
    tensors: Sequence[Tensor], dtype: str, blocks: Any, min_block: int
) -> tuple[Tensor, tuple]:
    """`keras_gradmon.core.batched.prepare` of tensors, some of a size known
    only at run time (TensorFlow only: on JAX every shape is static): the
    matrix and the fields of its block layout.

    Example:

    >>> matrix, fields = dynamic_matrix(tensors, "float32", [128], 64)  # doctest: +SKIP
    """
    return current().dynamic_matrix(tensors, dtype, blocks, min_block)


def bincount(index: Tensor, size: int) -> Tensor:
    """How many times each of `0 .. size - 1` occurs in the int32 vector
    `index` (all in range), as an int32 vector of length `size`.

    Example:

    >>> bincount(densify([0, 2, 2]), 3).tolist()  # doctest: +SKIP
    [1, 0, 2]
    """
    return current().bincount(index, size)


def global_norm(values: Sequence[Tensor]) -> Tensor:
    """The framework's own L2 norm of all elements of `values` (one floating
    dtype): `tf.linalg.global_norm` on TensorFlow. May overflow.

    Example:

    >>> float(global_norm([densify([3.0]), densify([4.0])]))
    5.0
    """
    return current().global_norm(values)


def put_row(rows: Tensor, slot: Tensor, row: Tensor) -> Tensor:
    """`rows` with `row` (its dtype, one row's shape) written over its
    row `slot`: a dynamic update slice, which XLA writes in place, where the
    step compiles. Outside XLA TensorFlow runs that op through XLA's
    on-demand compiler (about 0.1 ms a call), so a plain TensorFlow graph
    scatters the row instead.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> np.asarray(put_row(ops.zeros([2, 2]), 1, ops.ones([2]))).tolist()
    [[0.0, 0.0], [1.0, 1.0]]
    """
    return current().put_row(rows, slot, row)


def divide(x: Tensor, divisor: Tensor) -> Tensor:
    """`x / divisor`, `divisor` broadcast over the finite `x` (a scalar, or
    one per row), rounded once as IEEE division, as TensorFlow's kernels do.

    Example:

    >>> from keras import ops
    >>> float(divide(ops.ones([1, 2]) * 3e38, ops.ones([1, 1]) * 3e38)[0, 0])
    1.0
    """
    return current().divide(x, divisor)


def wide_float() -> str:
    """The widest float dtype the backend computes in: float64, except on JAX
    without `jax_enable_x64`, where it is float32.

    Example:

    >>> wide_float() in ("float64", "float32")
    True
    """
    return current().wide_float()


def unmasked_pays(every_step: bool) -> bool:
    """Whether the program being traced should reduce its large tensors
    without a mask (`batched_statistics(unpack_large=True)`), `every_step`
    saying whether it measures at every step. Only such a program: the
    unmasked pass keeps the masked one as its fallback, so it is about
    twice the statistics' ops to trace and compile (a tf-agents DQN's
    first call: 2.3 s with the masked pass alone, 3.3 to 3.5 s with both),
    which only a measurement at every step pays back.

    - On JAX: XLA:CPU's reductions read their input written out (a mask is
      a write and a read of every element: the statistics take about 30%
      less time without).
    - On TensorFlow outside XLA (a plain graph, as tf-agents runs its
      step, or eagerly): each mask is two or three kernels over every
      element (about 0.4 ms of a tf-agents DQN step). Not under XLA:
      TensorFlow 2.21's XLA fuses the mask into the reduction (7% less CPU
      time without, for 3 to 4 s more compile on the benchmark MLP).

    Example:

    >>> unmasked_pays(False)
    False
    """
    return current().unmasked_pays(every_step)


def state_dtype(dtype: str) -> str:
    """The dtype a state variable declared `dtype` gets on this backend:
    int64 is int32 on JAX without `jax_enable_x64` (which has no int64).

    Example:

    >>> state_dtype("float32")
    'float32'
    """
    return current().state_dtype(dtype)


def step_dtype() -> str:
    """The integer dtype steps are counted in inside the step: int64, or
    int32 on JAX without `jax_enable_x64`.

    Example:

    >>> step_dtype() in ("int64", "int32")
    True
    """
    return state_dtype("int64")


def update_if(pred: Tensor | bool, fn: Callable[[dict], dict], store: Any) -> None:
    """Replaces the values of `store` by `fn(values)` where `pred` holds.

    `fn` is pure: it maps a dict of state values to a dict with the same
    keys, dtypes and shapes. `store` has `read() -> dict` and
    `write(dict)`. On TensorFlow `fn` runs, and its results are assigned,
    inside a conditional whose untaken branch costs nothing; on JAX the
    conditional returns the values (`lax.cond`) and they are written after
    it, as Keras's JAX optimizers do (no side effect in a branch). A Python
    bool is known while tracing: no conditional.

    Example:

    >>> update_if(True, lambda v: {"n": v["n"] + 1}, store)  # doctest: +SKIP
    """
    if isinstance(pred, bool):
        if pred:
            store.write(fn(store.read()))
        return
    current().update_if(pred, fn, store)


def update_holding(
    pred: Tensor | bool,
    fn: Callable[[dict], dict],
    store: Any,
    hold: Tensor | bool,
    variables: list[Any],
) -> list[Any]:
    """`update_if`, and `values_if(hold, variables)` from inside its
    conditional (its taken branch; empty tensors from the other): one test
    of the step where the two make two. `hold` is tested inside the taken
    branch (True: held there with no further test).

    Example:

    >>> held = update_holding(due, fn, store, True, [v])  # doctest: +SKIP
    """
    if isinstance(pred, bool) or not variables:
        update_if(pred, fn, store)
        return values_if(hold if pred is True else False, variables)
    return current().update_holding(pred, fn, store, hold, variables)


def capture(variables: Sequence[Any], source: Callable | None, cache: dict) -> Any:
    """The values of the state `variables`, captured on the host without
    waiting for the device, as a sequence of array-likes (`np.asarray` of
    each gives its numbers). `source` maps the variables to their live
    values where the framework keeps them outside the variables (JAX's
    `fit`), None to read the variables; `cache` keeps per-variable readers.

    Example:

    >>> count, = capture([optimizer.iterations], None, {})  # doctest: +SKIP
    """
    return current().capture(variables, source, cache)


def barrier(values: list[Any], step: Tensor) -> list[Any]:
    """Bit-exact copies of `values` (None kept) that the compiler cannot fuse
    into their other readers: the monitor's own reader of the gradients, so
    the inner optimizer's update compiles as it would unwrapped
    (`tensorflow.exact_copies` under XLA, the values themselves outside it;
    `lax.optimization_barrier` on JAX). `step` is the step tensor, from
    which TensorFlow makes a runtime 0 its compiler cannot fold.

    Example:

    >>> barrier([None], step)  # doctest: +SKIP
    [None]
    """
    return current().barrier(values, step)


def values_if(pred: Tensor | bool, variables: list[Any]) -> list[Any]:
    """The values of `variables` held past their later update where `pred`
    holds, and nothing weight-sized held where it does not (TensorFlow,
    whose optimizers update variables in place).

    Example:

    >>> [x.shape for x in values_if(False, [v])]  # doctest: +SKIP
    [TensorShape([0])]
    """
    return current().values_if(pred, variables)


def replicas_in_sync() -> int:
    """How many replicas compute gradients together at this point of a trace
    (TensorFlow's `tf.distribute`; 1 elsewhere).

    Example:

    >>> replicas_in_sync()
    1
    """
    return current().replicas_in_sync()


def replica_sum(values: list[Any]) -> list[Any]:
    """`values` summed across the replicas in sync (as they are on one).

    Example:

    >>> replica_sum([None])
    [None]
    """
    return current().replica_sum(values)


def unconverted(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, left unconverted by AutoGraph on TensorFlow
    (`graph.unconverted`); itself on other backends.

    Example:

    >>> @unconverted
    ... def step(x):
    ...     return x + 1
    """
    if keras.backend.backend() != "tensorflow":
        return function
    from keras_gradmon.backend.tensorflow import unconverted as on_tensorflow

    return on_tensorflow(function)


def lean_train_function(model: Any, step: Callable) -> Callable | None:
    """On JAX, `model`'s train function over `step` without the optimizer
    variables `step` passes through untouched (`jax.LeanStep`: the
    monitor's state, on a step that measures nothing); None elsewhere, and
    where Keras would not `jax.jit` the step alone.

    Example:

    >>> lean_train_function(model, idle_step)  # doctest: +SKIP
    """
    if keras.backend.backend() != "jax":
        return None
    return current().lean_train_function(model, step)


def compile_aside(functions: Sequence[Any], on_cpu: bool = False) -> Any:
    """On JAX, where each of `functions` is a `lean_train_function` and JAX
    computes on an accelerator (or `on_cpu`), a `jax.Aside` that compiles
    them on a thread of their own; None elsewhere (each is compiled at its
    first call, on the training thread).

    Example:

    >>> compile_aside([idle, due])  # doctest: +SKIP
    """
    if keras.backend.backend() != "jax" or not functions:
        return None
    if not all(hasattr(f, "lean_step") for f in functions):
        return None
    module = current()
    if not on_cpu and not module.on_accelerator():
        return None
    return module.Aside(functions)


def trainer_values(model: Any, key: str) -> list | None:
    """The live values that Keras's JAX trainer holds for `model` under
    `key` ("trainable_variables", "non_trainable_variables",
    "optimizer_variables", in the order of the matching variables) while it
    is ahead of the variables: during `fit`, until the epoch ends, it keeps
    them in `model._jax_state` (donated to each next step) and purges the
    variables. None where the variables hold the values (and on TensorFlow).

    Example:

    >>> trainer_values(object(), "optimizer_variables") is None
    True
    """
    state = getattr(model, "_jax_state", None)
    if not state or getattr(model, "_jax_state_synced", True):
        return None
    return state.get(key) or None
