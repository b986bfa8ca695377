"""`GradientMonitorOptimizer`: the adapter for Keras 3 optimizers.

A `keras.optimizers.Optimizer` that measures (and clips) the gradients inside
the compiled train step, then hands them to the optimizer it wraps, built in
the style of Keras's own `LossScaleOptimizer`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import keras

from keras_gradmon import backend
from keras_gradmon.adapters.base import (
    ConfigFromInner,
    MonitoredOptimizer,
    check_not_monitored,
    forwarded,
    own_view,
    resolve_config,
    set_variables,
)
from keras_gradmon.adapters.live_state import LiveState
from keras_gradmon.core import loss_scale
from keras_gradmon.core.config import MonitorConfig
from keras_gradmon.core.monitor import GradientMonitor

_STEPS = {"tensorflow": "keras3_tf", "jax": "keras3_jax"}


def _step_module() -> ModuleType:
    """The module with the step of the current Keras backend."""
    return importlib.import_module(f"keras_gradmon.adapters.{_STEPS[_backend()]}")


def _backend() -> str:
    name = keras.backend.backend()
    if name not in _STEPS:
        raise ValueError(
            "GradientMonitorOptimizer runs on the TensorFlow and the JAX "
            f"backends of Keras. Received: KERAS_BACKEND={name!r}"
        )
    return name


unconverted = backend.unconverted


def handed_on(monitor: GradientMonitor, summed: list, clipped: Any, scale: Any) -> list:
    """What the inner optimizer is given: the summed gradients themselves
    unless clipping changed them, then the clipped ones, scaled back by the
    loss scale they were unscaled by."""
    if monitor.clip_rule is None or clipped is None:
        return summed
    return loss_scale.rescale(clipped, scale, like=summed)


@keras.saving.register_keras_serializable(package="keras_gradmon")
class GradientMonitorOptimizer(
    LiveState, ConfigFromInner, MonitoredOptimizer, keras.optimizers.Optimizer
):
    """Wraps an optimizer and records gradient statistics inside the step.

    On summary steps (see `MonitorConfig.every_n_steps`) it computes, inside
    the train step and under XLA too, per-variable gradient and weight
    statistics, group norms and the global norm, and stores them in its own
    non-trainable variables; on other steps it adds one graph conditional.
    Then it calls the inner optimizer with the same gradients (clipped, if
    configured). `GradientSummaryCallback` (or `keras_gradmon.write_summaries`)
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
    model.fit(x, y, callbacks=[keras_gradmon.GradientSummaryCallback("logs")])
    ```
    """

    def __new__(cls, inner_optimizer: Any = None, *args: Any, **kwargs: Any) -> Any:
        if cls is GradientMonitorOptimizer and not isinstance(
            inner_optimizer, keras.optimizers.Optimizer
        ):
            from keras_gradmon.adapters import wrap
            from keras_gradmon.adapters.kinds import (
                kind_of,
                unsupported_error,
            )

            if kind_of(inner_optimizer) is None:
                raise unsupported_error(inner_optimizer, "inner_optimizer")
            return wrap(inner_optimizer, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        inner_optimizer: keras.optimizers.Optimizer,
        config: MonitorConfig | dict | None = None,
        name: str | None = None,
        **options: Any,
    ) -> None:
        _backend()
        check_not_monitored(inner_optimizer, "inner_optimizer")
        monitor_config = resolve_config(config, options, name)
        super().__init__(learning_rate=0.0, name=name)
        self.inner_optimizer = inner_optimizer
        self.monitor = GradientMonitor(
            monitor_config, loss_scaled=loss_scale.is_loss_scaler(inner_optimizer)
        )
        self._live_state: Any = None

    def _make_variable(
        self, name: str, shape: tuple, dtype: str, initial: float
    ) -> Any:
        # `add_variable` without its fixed synchronization: one copy per
        # replica, written without synchronizing (backend.tensorflow.distribute).
        with keras.name_scope(self.name, caller=self):
            variable = keras.Variable(
                initializer=keras.initializers.Constant(initial),
                shape=shape,
                dtype=backend.state_dtype(dtype),
                trainable=False,
                aggregation="only_first_replica",
                synchronization="on_read",
                name=name,
            )
        self._track_variable(variable)
        return variable

    @unconverted
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
        this wrapper's: the monitor's state."""
        return self.inner_optimizer.variables + self._variables

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

    def scale_loss(self, loss: Any) -> Any:
        return self.inner_optimizer.scale_loss(loss)

    def finalize_variable_values(self, var_list: list) -> None:
        self.inner_optimizer.finalize_variable_values(var_list)

    # The step: the backend's own (adapters/keras3_tf.py, keras3_jax.py) -----

    @unconverted
    def apply(self, grads: list, trainable_variables: list | None = None) -> None:
        """Measures (and clips) the gradients, then applies them with the
        inner optimizer (see the class docstring)."""
        grads = list(grads)
        if grads and all(g is None for g in grads):
            raise ValueError("No gradients provided for any variable.")
        variables = self._resolve_variables(trainable_variables)
        _step_module().apply(self, grads, variables)

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
        from keras_gradmon.adapters import keras3_jax

        return keras3_jax.stateless_apply(
            self, optimizer_variables, grads, trainable_variables
        )

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


__all__ = ["GradientMonitorOptimizer"]
