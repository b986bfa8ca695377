"""`GradientMonitorOptimizer`: a Keras 3 optimizer that records gradient
statistics inside the compiled train step, then hands the gradients to the
optimizer it wraps.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
import tensorflow as tf

from keras_gradmon import distribute, loss_scale
from keras_gradmon.config import MonitorConfig
from keras_gradmon.monitor import GradientMonitor, MonitoredOptimizer


def _check_tensorflow_backend() -> None:
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "GradientMonitorOptimizer needs the TensorFlow backend of Keras. "
            f"Received: KERAS_BACKEND={keras.backend.backend()!r}"
        )


@keras.saving.register_keras_serializable(package="keras_gradmon")
class GradientMonitorOptimizer(MonitoredOptimizer, keras.optimizers.Optimizer):
    """Wraps a Keras optimizer and records gradient statistics in the step.

    On summary steps (see `MonitorConfig.every_n_steps`) it computes, inside
    the train step and under XLA too, per-variable gradient and weight
    statistics, group norms and the global norm, and stores them in its own
    non-trainable variables; on other steps it adds one graph conditional.
    Then it calls `inner_optimizer.apply` with the same gradients, so with no
    clipping configured training is bit-identical to the unwrapped optimizer.
    `GradientSummaryCallback` (or `keras_gradmon.write_summaries`) writes the
    recorded numbers to TensorBoard.

    Under `tf.distribute` (MirroredStrategy, MultiWorkerMirroredStrategy) it
    measures and clips the gradient that is applied: the sum over replicas,
    formed once, here, instead of inside the inner optimizer. For
    mixed_float16, wrap the loss scaler:
    `GradientMonitorOptimizer(keras.optimizers.LossScaleOptimizer(inner))`,
    compiled with `auto_scale_loss=False`; the statistics are then of the
    unscaled gradients, and the steps the scaler skips are counted as
    skipped (see docs/distributed.md).

    Args:
        inner_optimizer: The `keras.optimizers.Optimizer` to wrap.
        config: A `MonitorConfig` (or a dict of its options).
        name: The optimizer's name.
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
        # A tf_keras optimizer (tf-agents, TF_USE_LEGACY_KERAS=1) gets the
        # tf_keras wrapper. tf_keras is only looked at if already imported:
        # a tf_keras optimizer cannot exist otherwise.
        import sys

        if cls is GradientMonitorOptimizer and "tf_keras" in sys.modules:
            from keras_gradmon import legacy

            if legacy.is_tf_keras_optimizer(inner_optimizer):
                return legacy.LegacyGradientMonitorOptimizer(
                    inner_optimizer, *args, **kwargs
                )
        return super().__new__(cls)

    def __init__(
        self,
        inner_optimizer: keras.optimizers.Optimizer,
        config: MonitorConfig | dict | None = None,
        name: str | None = None,
        **options: Any,
    ) -> None:
        _check_tensorflow_backend()
        if not isinstance(inner_optimizer, keras.optimizers.Optimizer):
            raise ValueError(
                "`inner_optimizer` must be an instance of "
                "`keras.optimizers.Optimizer` (for tf_keras optimizers, as "
                "tf-agents uses, see keras_gradmon.legacy). Received: "
                f"inner_optimizer={inner_optimizer!r} "
                f"(of type {type(inner_optimizer).__name__})"
            )
        monitor_config = MonitorConfig.resolve(config, options)
        super().__init__(learning_rate=0.0, name=name)
        self.monitor_config = monitor_config
        self.inner_optimizer = inner_optimizer
        # A wrapped loss scaler skips non-finite steps: the monitor counts
        # them (as `skip_nonfinite` does) and its summaries show the count.
        if loss_scale.is_loss_scaler(inner_optimizer):
            monitor_config = dataclasses.replace(monitor_config, skip_nonfinite=True)
        self.monitor = GradientMonitor(monitor_config)

    def _make_variable(
        self, name: str, shape: tuple, dtype: str, initial: float
    ) -> Any:
        # `add_variable` without its fixed synchronization: one copy per
        # replica, written without synchronizing (keras_gradmon.distribute).
        with keras.name_scope(self.name, caller=self):
            variable = keras.Variable(
                initializer=keras.initializers.Constant(initial),
                shape=shape,
                dtype=dtype,
                trainable=False,
                aggregation="only_first_replica",
                synchronization="on_read",
                name=name,
            )
        self._track_variable(variable)
        return variable

    def build(self, var_list: list) -> None:
        self.monitor.build(var_list, self._make_variable)
        self.inner_optimizer.build(var_list)
        super().build(var_list)

    @property
    def variables(self) -> list:
        return self._variables + self.inner_optimizer.variables

    def apply(self, grads: list, trainable_variables: list | None = None) -> None:
        """Measures (and clips) the gradients, then applies them with the
        inner optimizer (see the class docstring).

        Under a multi-replica strategy the gradients are summed across the
        replicas first, once, and the inner optimizer applies that sum
        without summing again; with a `LossScaleOptimizer` inside, the
        statistics are of the unscaled gradients.
        """
        grads = list(grads)
        if trainable_variables is None:
            if not self.built:
                raise ValueError(
                    "When passing `grads` without `trainable_variables`, the "
                    "optimizer must already be built. Call "
                    "`optimizer.build(trainable_variables)` first."
                )
            trainable_variables = self._trainable_variables
        else:
            trainable_variables = list(trainable_variables)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        indices = [self._get_variable_index(v) for v in trainable_variables]
        summed = distribute.all_reduce_sum(grads)
        inner = self.inner_optimizer
        scaler = loss_scale.is_loss_scaler(inner)
        scale = loss_scale.current_scale(inner)

        def applied(out: list) -> tf.Tensor | None:
            # The loss scaler's own test, on exactly what it will be given.
            return loss_scale.will_apply(inner, self._handed_on(summed, out, scale))

        with keras.name_scope(self.name, caller=self):
            out, finite = self.monitor.record(
                self.iterations,
                loss_scale.unscale(summed, scale),
                indices,
                applied=applied if scaler else None,
                loss_scale=scale if scaler else None,
            )
        handed_on = self._handed_on(summed, out, scale)
        with distribute.keras_reduction_disabled(inner):
            if self.monitor_config.skip_nonfinite and not scaler:
                # As LossScaleOptimizer: weights and the inner optimizer's
                # state untouched on a non-finite step.
                distribute.apply_if(
                    finite, self._apply_inner, (handed_on, trainable_variables)
                )
            else:
                # (A loss scaler skips non-finite steps itself.)
                self._apply_inner(handed_on, trainable_variables)

    def _handed_on(self, summed: list, out: list, scale: tf.Tensor | None) -> list:
        """What the inner optimizer gets: the summed gradients themselves
        unless clipping changed them, then the clipped ones, scaled back."""
        if self.monitor.clip_rule is None:
            return summed
        return loss_scale.rescale(out, scale, like=summed)

    def _apply_inner(self, grads: list, trainable_variables: list) -> None:
        self.inner_optimizer.apply(grads, trainable_variables)

    # Delegation, as keras.optimizers.LossScaleOptimizer does ------------------

    @property
    def learning_rate(self) -> Any:
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate: Any) -> None:
        self.inner_optimizer.learning_rate = learning_rate

    @property
    def iterations(self) -> Any:
        return self.inner_optimizer.iterations

    @property
    def loss_scale_factor(self) -> float | None:
        """The inner optimizer's: the monitor never scales the loss itself."""
        inner = getattr(self, "inner_optimizer", None)
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
        # Passed on, as MultiOptimizer does; an optimizer wrapping the
        # monitor sets None here to switch the inner loss scaling off.
        inner = getattr(self, "inner_optimizer", None)
        if inner is None:  # the base constructor: nothing to pass on yet
            return
        if loss_scale.is_loss_scaler(inner):
            raise loss_scale.double_scaling_error(self.name, value)
        inner.loss_scale_factor = value

    def scale_loss(self, loss: Any) -> Any:
        return self.inner_optimizer.scale_loss(loss)

    def finalize_variable_values(self, var_list: list) -> None:
        self.inner_optimizer.finalize_variable_values(var_list)

    def get_config(self) -> dict:
        # Only our own arguments: the base optimizer's are the inner one's.
        config = self.monitor_config.to_serializable_dict()
        return {
            "name": self.name,
            "inner_optimizer": keras.saving.serialize_keras_object(
                self.inner_optimizer
            ),
            "config": config,
        }

    @classmethod
    def from_config(
        cls, config: dict, custom_objects: Any = None
    ) -> GradientMonitorOptimizer:
        config = dict(config)
        inner = keras.saving.deserialize_keras_object(
            config.pop("inner_optimizer"), custom_objects=custom_objects
        )
        return cls(inner, **config)
