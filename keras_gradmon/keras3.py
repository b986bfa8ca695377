"""`GradientMonitorOptimizer`: the Keras 3 wrapper, one class shaped like
Keras's own `LossScaleOptimizer`.

It keeps `inner_optimizer`, builds its own state in `build()`, forwards
`learning_rate`, `iterations` and `variables`, and branches in the graph,
never with a Python `if` on a tensor. The monitored step is one method for
both backends (`_monitored`: unscale, clip, decide, measure). What differs
between the backends is where the state lives, and it is said in one
place, the two entry points Keras calls:

- TensorFlow calls `apply`: the state is the variables (assigned inside
  the taken branch), the gradients are summed across replicas here, once,
  and the inner update is gated by `tf.distribute`'s own conditional.
- JAX calls `stateless_apply` (Keras's trainer, a hand-written `jax.jit`
  loop): the state goes in as values and comes out as new values, as
  `LossScaleOptimizer.stateless_apply` does; an eager `apply` runs it
  jitted and assigns the results. During `fit` the trainer keeps the live
  variables in `model._jax_state` until the epoch ends: `bind_model` points
  host reads there.

Example:

```python
optimizer = keras_gradmon.GradientMonitorOptimizer(
    keras.optimizers.Adam(1e-3), every_n_steps=10, groups={"head": "dense_2"}
)
model.compile(optimizer=optimizer, loss="mse", jit_compile=True)
```
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_gradmon import backend
from keras_gradmon.core import loss_scale
from keras_gradmon.core.config import MonitorConfig
from keras_gradmon.core.monitor import GradientMonitor
from keras_gradmon.core.noise_scale import MicroBatches, replicas
from keras_gradmon.core.state import ValueStore
from keras_gradmon.schedule import measures
from keras_gradmon.wrapping import (
    ConfigFromInner,
    MonitoredOptimizer,
    check_not_monitored,
    forwarded,
    own_view,
    resolve_config,
    set_variables,
)
from keras_gradmon.writer import MonitorWriter

_BACKENDS = ("tensorflow", "jax")

#: What the base class creates for itself, saved before the monitor's state
#: by the previous layout: its iteration count and learning rate.
_BASE_VARIABLES = ("iteration", "learning_rate")


def _check_backend() -> str:
    name = keras.backend.backend()
    if name not in _BACKENDS:
        raise ValueError(
            "GradientMonitorOptimizer runs on the TensorFlow and the JAX "
            f"backends of Keras. Received: KERAS_BACKEND={name!r}"
        )
    return name


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


@keras.saving.register_keras_serializable(package="keras_gradmon")
class GradientMonitorOptimizer(
    ConfigFromInner, MonitoredOptimizer, keras.optimizers.Optimizer
):
    """Wraps an optimizer and records gradient statistics inside the step.

    On summary steps (see `MonitorConfig.every_n_steps`) it computes, inside
    the train step and under XLA too, per-variable gradient and weight
    statistics, group norms and the global norm, and stores them in its own
    non-trainable variables; on other steps it adds one graph conditional.
    Then it calls the inner optimizer with the same gradients (clipped, if
    configured). `GradientMonitorCallback` (or `keras_gradmon.write_summaries`)
    writes the recorded numbers to TensorBoard.

    Given a tf_keras or a `tf.compat.v1.train` optimizer, the constructor
    returns the wrapper of that kind (see `keras_gradmon.wrap`).

    Under `tf.distribute` it measures and clips the gradient that is applied:
    the sum over replicas, formed once, here. For mixed_float16, wrap the
    loss scaler: `GradientMonitorOptimizer(keras.optimizers.LossScaleOptimizer(
    inner))`, compiled with `auto_scale_loss=False` (docs/distributed.md).

    Args:
        inner_optimizer: The optimizer to wrap.
        config: A `MonitorConfig` (or a dict of its options).
        name: The optimizer's name; also the default `tag_scope`, so that
            several named wrappers in one run never share tags.
        **options: `MonitorConfig` options, overriding those of `config`.

    Example:

    ```python
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3), every_n_steps=10, groups={"head": "dense_2"}
    )
    model.compile(optimizer=optimizer, loss="mse", jit_compile=True)
    model.fit(x, y, callbacks=[keras_gradmon.GradientMonitorCallback("logs")])
    ```
    """

    def __new__(cls, inner_optimizer: Any = None, *args: Any, **kwargs: Any) -> Any:
        if cls is GradientMonitorOptimizer and not isinstance(
            inner_optimizer, keras.optimizers.Optimizer
        ):
            from keras_gradmon.legacy import wrapper_for

            check_not_monitored(inner_optimizer, "inner_optimizer")
            return wrapper_for(inner_optimizer, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        inner_optimizer: keras.optimizers.Optimizer,
        config: MonitorConfig | dict | None = None,
        name: str | None = None,
        **options: Any,
    ) -> None:
        _check_backend()
        check_not_monitored(inner_optimizer, "inner_optimizer")
        monitor_config = resolve_config(config, options, name)
        super().__init__(learning_rate=0.0, name=name)
        self.inner_optimizer = inner_optimizer
        self.monitor = GradientMonitor(
            monitor_config, loss_scaled=loss_scale.is_loss_scaler(inner_optimizer)
        )
        self._live_state: Callable[[], list | None] | None = None

    def _make_variable(
        self, name: str, shape: tuple, dtype: str, initial: float
    ) -> Any:
        # `add_variable` without its fixed synchronization: one copy per
        # replica, written without synchronizing (backend.distribute). The
        # initial value is a NumPy array, not an initializer: on JAX each
        # initializer call compiles a program for its shape (about 35 ms a
        # variable, in the first fit's time).
        dtype = backend.state_dtype(dtype)
        with keras.name_scope(self.name, caller=self):
            variable = keras.Variable(
                initializer=np.full(shape, initial, dtype),
                dtype=dtype,
                trainable=False,
                aggregation="only_first_replica",
                synchronization="on_read",
                name=name,
            )
        self._track_variable(variable)
        return variable

    @backend.unconverted
    def build(self, var_list: list) -> None:
        self.monitor.build(var_list, self._make_variable)
        if self._live_state is not None:
            self.monitor.state.source = self._read_live
        self.inner_optimizer.build(var_list)
        # EMA and gradient accumulation are the inner optimizer's, not ours.
        with own_view(self):
            super().build(var_list)

    # Delegation, as keras.optimizers.LossScaleOptimizer does ------------------

    learning_rate = forwarded("learning_rate", writable=True)
    iterations = forwarded("iterations")
    clipnorm = forwarded("clipnorm")
    clipvalue = forwarded("clipvalue")
    global_clipnorm = forwarded("global_clipnorm")
    use_ema = forwarded("use_ema")
    ema_momentum = forwarded("ema_momentum")
    ema_overwrite_frequency = forwarded("ema_overwrite_frequency")
    gradient_accumulation_steps = forwarded("gradient_accumulation_steps")
    weight_decay = forwarded("weight_decay")

    def __getattr__(self, name: str) -> Any:
        # Reached only for what this wrapper does not have itself: a public
        # hyper-parameter of the inner optimizer (`beta_1`, `momentum`, ...).
        inner = self.__dict__.get("inner_optimizer")
        if name.startswith("_") or inner is None:
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}"
            )
        return getattr(inner, name)

    @property
    def variables(self) -> list:
        """The inner optimizer's variables (its iteration count first), then
        this wrapper's: the monitor's state. Not the base class's own
        iteration count and learning rate, which nothing reads (both are
        the inner optimizer's, forwarded): Keras's JAX trainer threads
        every one of `variables` through each train step."""
        unused = (self._iterations, self._learning_rate)
        own = [v for v in self._variables if not any(v is u for u in unused)]
        return self.inner_optimizer.variables + own

    def set_weights(self, weights: list) -> None:
        """Sets this wrapper's and the inner optimizer's variables, in the
        order of `variables`."""
        set_variables(self, weights)

    def exclude_from_weight_decay(
        self, var_list: list | None = None, var_names: list | None = None
    ) -> None:
        """Passed on to the inner optimizer, which applies the decay."""
        self.inner_optimizer.exclude_from_weight_decay(
            var_list=var_list, var_names=var_names
        )

    @property
    def loss_scale_factor(self) -> float | None:
        """The inner optimizer's: the monitor never scales the loss itself."""
        inner = self.__dict__.get("inner_optimizer")
        return None if inner is None else inner.loss_scale_factor

    def __setattr__(self, name: str, value: Any) -> None:
        # Keras's tracking skips an assignment of the value an attribute
        # already reads, and a LossScaleOptimizer wrapped around the monitor
        # assigns None, which it may read: handled here, never skipped.
        if name == "loss_scale_factor":
            self._set_loss_scale_factor(value)
            return
        super().__setattr__(name, value)

    def _set_loss_scale_factor(self, value: float | None) -> None:
        inner = self.__dict__.get("inner_optimizer")
        if inner is None:  # the base constructor: nothing to pass on yet
            return
        if loss_scale.is_loss_scaler(inner):
            raise loss_scale.double_scaling_error(self.name, value)
        inner.loss_scale_factor = value

    def save_own_variables(self, store: Any) -> None:
        """Saves the inner optimizer's and the monitor's state, after the
        monitor's writer published every summary that state holds: a run
        restored from it (`BackupAndRestore`) does not write them again."""
        MonitorWriter.write_recorded(self.monitor)
        super().save_own_variables(store)

    def load_own_variables(self, store: Any) -> None:
        """Loads the inner optimizer's and the monitor's state, by position
        in `variables`, as Keras does. A store of the previous layout
        (before the rings' counts and the step counts were folded, with the
        wrapper's base iteration count and learning rate) is converted.

        Raises:
            ValueError: If the store holds monitor state of neither layout.
        """
        size, inner = len(store.keys()), len(self.inner_optimizer.variables)
        unbuilt = size <= inner + len(_BASE_VARIABLES)  # no monitor state in it
        if not self.monitor.built or unbuilt or size == len(self.variables):
            super().load_own_variables(store)  # Keras's warning where unequal
            return
        state = self.monitor.state
        previous = inner + len(_BASE_VARIABLES) + len(state.previous_names())
        if size != previous:
            raise ValueError(
                f"Optimizer {self.name!r} holds {len(self.variables)} variables "
                f"({inner} of its inner optimizer, then the monitor's state); a "
                f"store of its previous layout holds {previous}. The store does "
                "not match: it was saved with other monitor options. Received: "
                f"a store of {size} variables"
            )
        values = [store[str(i)] for i in range(size)]
        own = state.upgrade(values[inner + len(_BASE_VARIABLES) :])
        merged = values[:inner] + own
        super().load_own_variables({str(i): v for i, v in enumerate(merged)})

    def scale_loss(self, loss: Any) -> Any:
        return self.inner_optimizer.scale_loss(loss)

    def finalize_variable_values(self, var_list: list) -> None:
        self.inner_optimizer.finalize_variable_values(var_list)

    @property
    def counts_every_step(self) -> bool:
        """Whether the step count (`iterations`) advances by exactly one at
        each train step, so that the host knows which steps are due without
        reading it: no step can be skipped (`skip_nonfinite`, `skip_spikes`,
        a loss scaler inside) and no gradients are accumulated.

        Example:

        >>> GradientMonitorOptimizer(keras.optimizers.SGD()).counts_every_step
        True
        """
        inner, monitor = self.inner_optimizer, self.monitor
        skips = monitor.config.skip_nonfinite or monitor.signals.skipper is not None
        accumulates = bool(getattr(inner, "gradient_accumulation_steps", None))
        return not (skips or accumulates or loss_scale.is_loss_scaler(inner))

    # Where the host finds the live state ---------------------------------------

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
        ends); a no-op on TensorFlow.

        Example:

        >>> optimizer.bind_model(model)  # doctest: +SKIP
        """
        if keras.backend.backend() == "jax":
            self.use_state(
                lambda: backend.trainer_values(model, "optimizer_variables")
            )

    def read_iterations(self) -> int:
        """The inner optimizer's step count, read on the host (from the live
        state on JAX).

        Example:

        >>> optimizer.read_iterations()  # doctest: +SKIP
        120
        """
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

    # The step ---------------------------------------------------------------------

    @backend.unconverted
    def apply(self, grads: list, trainable_variables: list | None = None) -> None:
        """Measures (and clips) the gradients, then applies them with the
        inner optimizer (see the class docstring)."""
        grads = list(grads)
        if grads and all(g is None for g in grads):
            raise ValueError("No gradients provided for any variable.")
        variables = self._resolve_variables(trainable_variables)
        if keras.backend.backend() == "jax":
            self._apply_stateless(grads, variables)
        else:
            self._apply_to_variables(grads, variables)

    def stateless_apply(
        self, optimizer_variables: list, grads: list, trainable_variables: list
    ) -> tuple[list, list]:
        """`apply` without side effects: the new trainable and optimizer
        variables' values (the inner optimizer's, then the monitor's state),
        as Keras's JAX trainer and a hand-written `jax.jit` loop call it."""
        if keras.backend.backend() != "jax":
            return super().stateless_apply(
                optimizer_variables, grads, trainable_variables
            )
        if not self.built:
            raise ValueError(
                f"To call `stateless_apply`, {type(self).__name__} must be "
                "built (i.e. its variables must have been created). You can "
                "build it via `optimizer.build(trainable_variables)`."
            )
        return self._stateless_step(optimizer_variables, grads, trainable_variables)

    def _apply_to_variables(self, grads: list, variables: list) -> None:
        """TensorFlow: the step on the variables. Sum across replicas, clip,
        decide the skip, measure, then the inner optimizer's own `apply`
        (gated where a step may be skipped), then the update ratios."""
        from keras_gradmon.backend import distribute

        rows = [self._get_variable_index(v) for v in variables]
        summed = distribute.all_reduce_sum(grads)
        monitor, inner = self.monitor, self.inner_optimizer
        with keras.name_scope(self.name, caller=self):
            given, verdict, due = self._monitored(grads, summed, variables, rows)
            before = monitor.weights_before(due, variables, rows)
        with distribute.keras_reduction_disabled(inner):
            if verdict is True:
                inner.apply(given, variables)
            else:
                distribute.apply_if(verdict, inner.apply, (given, variables))
        with keras.name_scope(self.name, caller=self):
            monitor.record_updates(due, before, variables, rows)

    def _stateless_step(
        self, optimizer_variables: list, grads: list, trainable: list
    ) -> tuple[list, list]:
        """JAX: the step on values, as `LossScaleOptimizer.stateless_apply`."""
        inner = self.inner_optimizer
        count = len(inner.variables)
        inner_values = list(optimizer_variables[:count])
        own = list(optimizer_variables[count:])
        names = self._state_names()
        store = ValueStore({n: v for n, v in zip(names, own) if n is not None})
        trainable = list(trainable)
        grads = [g if g is None else ops.convert_to_tensor(g) for g in grads]
        rows = [k for k, g in enumerate(grads) if g is not None]
        of = _values_of(inner.variables, inner_values)
        present = [grads[k] for k in rows]
        built = [self._trainable_variables[k] for k in rows]
        given, verdict, due = self._monitored(
            present, present, built, rows, store, dict(enumerate(trainable)), of
        )
        given = _placed(grads, rows, given)
        new_trainable, new_inner = _inner_apply(
            inner, verdict, inner_values, given, trainable
        )
        before = {k: trainable[k] for k in rows}
        after = {k: new_trainable[k] for k in rows}
        self.monitor.measure_updates(due, before, after, store)
        new_own = [v if n is None else store.values[n] for n, v in zip(names, own)]
        return list(new_trainable), list(new_inner) + new_own

    def _apply_stateless(self, grads: list, variables: list) -> None:
        """JAX, eagerly: `stateless_apply` jitted (made once: one compiled
        program, not the monitor op by op) on the variables' values, the
        results assigned."""
        built = list(self._trainable_variables)
        position = {id(v): k for k, v in enumerate(built)}
        full: list[Any] = [None] * len(built)
        for g, v in zip(grads, variables):
            full[position[id(v)]] = g
        compiled = self.__dict__.get("_compiled_apply")
        if compiled is None:
            import jax

            compiled = jax.jit(self._stateless_step)
            self.__dict__["_compiled_apply"] = compiled
        new_trainable, new_optimizer = compiled(
            [v.value for v in self.variables], full, [v.value for v in built]
        )
        for variable, value in zip(built, new_trainable):
            variable.assign(value)
        for variable, value in zip(self.variables, new_optimizer):
            variable.assign(value)

    def _monitored(
        self,
        grads: list,
        summed: list,
        variables: list,
        rows: list[int],
        store: Any = None,
        weights: dict | None = None,
        of: Callable[[Any], Any] | None = None,
    ) -> tuple[list, Any, Any]:
        """`(gradients for the inner optimizer, whether to apply them, what was
        recorded)`, from this replica's `grads` and their cross-replica sum,
        the state in `store` (default: the variables) updated.

        The statistics are of the unscaled gradients when the inner
        optimizer scales the loss; a `LossScaleOptimizer` inside decides the
        skips itself, by its own test on exactly what it will be given.
        `weights` and `of` give the values of the trainable and the inner
        optimizer's variables where they are not the variables' own (JAX).
        """
        inner, monitor = self.inner_optimizer, self.monitor
        step = self._step(of)
        scale = loss_scale.current_scale(inner, of)
        # The monitor's own readers of the gradients (see `backend.barrier`),
        # where it reads them: not in a program that measures nothing.
        reads = measures() or monitor.works_every_step
        barred = reads and monitor.clip_rule is None
        readable = backend.barrier(summed, step) if barred else summed
        measured = loss_scale.unscale(readable, scale)
        parts = self._parts(grads, variables, scale, of)
        if not loss_scale.is_loss_scaler(inner):
            done = monitor.process(step, measured, rows, store, weights, parts)
            return self._handed_on(summed, done.grads, scale), done.apply, done.due
        outcome = monitor.clip(measured, rows, store, weights)
        given = self._handed_on(summed, outcome and outcome.grads, scale)
        scaler = loss_scale.will_apply(inner, given)
        applied, gate = monitor.decide(step, outcome, store, scaler, parts)
        due = monitor.measure(
            step, measured, rows, outcome, applied, scale, store=store, weights=weights
        )
        return given, gate, due

    def _step(self, of: Callable[[Any], Any] | None) -> Any:
        """The inner optimizer's step (`iterations`), from its counter's
        value (`step_counter`)."""
        counter, per_step = step_counter(self.inner_optimizer)
        count = ops.convert_to_tensor(counter) if of is None else of(counter)
        return count if per_step == 1 else ops.floor_divide(count, per_step)

    def _handed_on(self, summed: list, clipped: Any, scale: Any) -> list:
        """What the inner optimizer is given: the summed gradients themselves
        unless clipping changed them, then the clipped ones, scaled back by
        the loss scale they were unscaled by."""
        if self.monitor.clip_rule is None or clipped is None:
            return summed
        return loss_scale.rescale(clipped, scale, like=summed)

    def _parts(
        self, grads: list, variables: list, scale: Any, of: Callable | None
    ) -> Any:
        """How this step's gradient splits, for the noise scale: the replicas
        under `tf.distribute`, else the micro-batches of the inner
        optimizer's `gradient_accumulation_steps`, else None (no estimate:
        one batch gives one gradient)."""
        if self.monitor.signals.noise is None:
            return None
        count = backend.replicas_in_sync()
        if count > 1:
            return replicas(grads, count, scale)
        return self._micro_batches(variables, of)

    def _micro_batches(self, variables: Sequence[Any], of: Callable | None) -> Any:
        """The micro-batches of the inner optimizer's gradient accumulation,
        for the gradients of `variables` (in that order); None when it does
        not accumulate."""
        inner = self.inner_optimizer
        k = getattr(inner, "gradient_accumulation_steps", None)
        if not k:
            return None
        read = of or ops.convert_to_tensor
        stores = inner._accumulated_gradients
        accumulators = [stores[inner._get_variable_index(v)] for v in variables]

        def mean_sq(grads: list) -> Any:
            total = ops.zeros((), "float32")
            for accumulator, grad in zip(accumulators, grads):
                grad = ops.cast(backend.densify(grad), "float32")
                mean = (ops.cast(read(accumulator), "float32") + grad) / float(k)
                total = total + ops.sum(ops.square(mean))
            return total

        # The micro-step count (`iterations` counts updates when accumulating).
        counter, _ = step_counter(inner)
        micro_step = ops.cast(read(counter), backend.step_dtype())
        completes = ops.equal(ops.mod(micro_step + 1, k), 0)
        return MicroBatches(int(k), completes, mean_sq)

    def _state_names(self) -> list[str | None]:
        """The monitor-state name of each of the wrapper's own variables (the
        ones after the inner optimizer's in `variables`)."""
        names = {id(v): n for n, v in self.monitor.state.variables.items()}
        own = self.variables[len(self.inner_optimizer.variables) :]
        return [names.get(id(v)) for v in own]

    def _resolve_variables(self, trainable_variables: list | None) -> list:
        if trainable_variables is None:
            if not self.built:
                raise ValueError(
                    "When passing `grads` without `trainable_variables`, the "
                    "optimizer must already be built. Call "
                    "`optimizer.build(trainable_variables)` first."
                )
            return list(self._trainable_variables)
        variables = list(trainable_variables)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(variables)
            self.built = True
        return variables

    # Serialization: the inner optimizer with the framework's own functions.

    _serialize = staticmethod(keras.saving.serialize_keras_object)
    _deserialize = staticmethod(keras.saving.deserialize_keras_object)


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


def _values_of(variables: list, values: list) -> Callable[[Any], Any]:
    """Maps each of `variables` to its value in `values`."""
    position = {id(v): k for k, v in enumerate(variables)}
    return lambda variable: values[position[id(variable)]]


def _placed(grads: list, rows: list[int], present: list) -> list:
    """`grads` with the present ones (at `rows`) replaced by `present`."""
    out = list(grads)
    for k, g in zip(rows, present):
        out[k] = g
    return out


__all__ = ["GradientMonitorOptimizer", "step_counter"]
