"""The Keras 3 adapter's step on JAX, as Keras's `LossScaleOptimizer.
stateless_apply` does it: the state goes in as values and comes out as new
values; no branch assigns anything. `apply` (eager) runs it on the
variables' values and assigns the results.

During `fit` the trainer keeps the live variables in `model._jax_state`
(donated to the next step) until the epoch ends: `fit_state` is where the
host reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from keras import ops

from keras_gradmon import backend
from keras_gradmon.adapters import noise_parts
from keras_gradmon.adapters.keras3 import handed_on
from keras_gradmon.adapters.live_state import step_counter
from keras_gradmon.core import loss_scale
from keras_gradmon.core.state import ValueStore


def stateless_apply(
    wrapper: Any, optimizer_variables: list, grads: list, trainable_variables: list
) -> tuple[list, list]:
    """`wrapper.stateless_apply(...)` on JAX: the new trainable values and
    the new optimizer values (the inner optimizer's, then the wrapper's)."""
    inner = wrapper.inner_optimizer
    count = len(inner.variables)
    inner_values = list(optimizer_variables[:count])
    own = list(optimizer_variables[count:])
    names = _state_names(wrapper)
    store = ValueStore({n: v for n, v in zip(names, own) if n is not None})
    trainable_variables = list(trainable_variables)
    grads = [g if g is None else ops.convert_to_tensor(g) for g in grads]
    of = _values_of(inner.variables, inner_values)
    grads, verdict, due = _monitored(wrapper, grads, trainable_variables, store, of)
    new_trainable, new_inner = _inner_apply(
        inner, verdict, inner_values, grads, trainable_variables
    )
    rows = [k for k, g in enumerate(grads) if g is not None]
    before = {k: trainable_variables[k] for k in rows}
    after = {k: new_trainable[k] for k in rows}
    wrapper.monitor.measure_updates(due, before, after, store)
    new_own = [v if n is None else store.values[n] for n, v in zip(names, own)]
    return list(new_trainable), list(new_inner) + new_own


def _monitored(
    wrapper: Any, grads: list, weights: list, store: ValueStore, of: Callable
) -> tuple[list, Any, Any]:
    """`(gradients for the inner optimizer, whether to apply them, what was
    recorded)`, the state in `store` updated (see `keras3_tf._monitored`)."""
    inner, monitor = wrapper.inner_optimizer, wrapper.monitor
    indices = [k for k, g in enumerate(grads) if g is not None]
    present = [grads[k] for k in indices]
    by_row = dict(enumerate(weights))
    step = _step(inner, of)
    scale = loss_scale.current_scale(inner, of)
    readable = present if monitor.clip_rule else backend.barrier(present, 0)
    measured = loss_scale.unscale(readable, scale)
    built = [wrapper._trainable_variables[k] for k in indices]
    parts = noise_parts.micro_batches(wrapper, built, of)
    if not loss_scale.is_loss_scaler(inner):
        done = monitor.process(step, measured, indices, store, by_row, parts)
        clipped = handed_on(monitor, present, done.grads, scale)
        return _placed(grads, indices, clipped), done.apply, done.due
    outcome = monitor.clip(measured, indices, store, by_row)
    clipped = handed_on(monitor, present, outcome and outcome.grads, scale)
    scaler = loss_scale.will_apply(inner, clipped)
    applied, gate = monitor.decide(step, outcome, store, scaler, parts)
    due = monitor.measure(
        step, measured, indices, outcome, applied, scale, store=store, weights=by_row
    )
    return _placed(grads, indices, clipped), gate, due


def _inner_apply(
    inner: Any, verdict: Any, inner_values: list, grads: list, trainable: list
) -> tuple[list, list]:
    """The inner optimizer's `stateless_apply`, where `verdict` holds; else
    the values unchanged, bit for bit."""

    def applied() -> tuple[list, list]:
        new_trainable, new_inner = inner.stateless_apply(inner_values, grads, trainable)
        return list(new_trainable), list(new_inner)

    if verdict is True:
        return applied()
    return ops.cond(verdict, applied, lambda: (list(trainable), list(inner_values)))


def apply(wrapper: Any, grads: list, variables: list) -> None:
    """`wrapper.apply(grads, variables)` eagerly on JAX: `stateless_apply`
    on the variables' values, the results assigned."""
    built = list(wrapper._trainable_variables)
    position = {id(v): k for k, v in enumerate(built)}
    full: list[Any] = [None] * len(built)
    for g, v in zip(grads, variables):
        full[position[id(v)]] = g
    optimizer_values = [v.value for v in wrapper.variables]
    new_trainable, new_optimizer = _compiled(wrapper)(
        optimizer_values, full, [v.value for v in built]
    )
    for variable, value in zip(built, new_trainable):
        variable.assign(value)
    for variable, value in zip(wrapper.variables, new_optimizer):
        variable.assign(value)


def _compiled(wrapper: Any) -> Callable[..., tuple[list, list]]:
    """`stateless_apply` of `wrapper` under `jax.jit`, made once: an eager
    `apply` then runs one compiled program, not the monitor op by op."""
    compiled = wrapper.__dict__.get("_compiled_apply")
    if compiled is None:
        import jax

        compiled = jax.jit(lambda *args: stateless_apply(wrapper, *args))
        wrapper.__dict__["_compiled_apply"] = compiled
    return compiled


def fit_state(model: Any) -> Callable[[], list | None]:
    """Reads `model`'s live optimizer variables during a JAX `fit`: the
    trainer's `_jax_state` while it is ahead of the variables (None
    otherwise: the variables hold them)."""

    return lambda: backend.trainer_values(model, "optimizer_variables")


def _state_names(wrapper: Any) -> list[str | None]:
    """The monitor-state name of each of the wrapper's own variables (None
    for its base class's: its unused iteration count and learning rate)."""
    names = {id(v): n for n, v in wrapper.monitor.state.variables.items()}
    return [names.get(id(v)) for v in wrapper._variables]


def _step(inner: Any, of: Callable) -> Any:
    """The inner optimizer's step (`iterations`), from its counter's value
    (`live_state.step_counter`)."""
    counter, per_step = step_counter(inner)
    count = of(counter)
    return count if per_step == 1 else ops.floor_divide(count, per_step)


def _values_of(variables: list, values: list) -> Callable[[Any], Any]:
    """Maps each of `variables` to its value in `values`."""
    position = {id(v): k for k, v in enumerate(variables)}
    return lambda variable: values[position[id(variable)]]


def _placed(grads: list, indices: list[int], present: list) -> list:
    """`grads` with the present ones (at `indices`) replaced by `present`."""
    out = list(grads)
    for k, g in zip(indices, present):
        out[k] = g
    return out
