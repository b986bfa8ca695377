"""`TfKerasGradientMonitorOptimizer`: the adapter for tf_keras optimizers, as
tf-agents uses them (`TF_USE_LEGACY_KERAS=1`).

It is a tf_keras optimizer built on tf_keras's classic base
(`tf.keras.optimizers.legacy.Optimizer`), whatever the kind of the optimizer
it wraps (new-style or classic): agents take it where they take
`tf.keras.optimizers.Adam(...)` and call its `apply_gradients`. Under a default
`tf.summary` writer it writes the statistics from inside the train step, as
tf-agents' own summaries are written. (SacAgent converts new-style
optimizers to classic ones by rebuilding them from their config; it leaves
this one alone. See `keras_gradmon.integrations.tf_agents` to convert the
inner one as SacAgent would.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tensorflow as tf
import tf_keras

from keras_gradmon.backend import distribute
from keras_gradmon.backend.tensorflow import unconverted
from keras_gradmon.legacy.stepped import StepAdapter
from keras_gradmon.wrapping import ConfigFromInner, forwarded

_NEW_BASE = tf_keras.optimizers.Optimizer
_CLASSIC_BASE = tf_keras.optimizers.legacy.Optimizer


def is_tf_keras_optimizer(optimizer: Any) -> bool:
    """Whether `optimizer` is a tf_keras optimizer (new-style or classic)."""
    return isinstance(optimizer, (_NEW_BASE, _CLASSIC_BASE))


@tf_keras.saving.register_keras_serializable(package="keras_gradmon")
class TfKerasGradientMonitorOptimizer(ConfigFromInner, StepAdapter, _CLASSIC_BASE):
    """Wraps a tf_keras optimizer and records gradient statistics in the step.

    The tf_keras counterpart of `GradientMonitorOptimizer` (which returns one
    of these when given a tf_keras optimizer). It measures the gradients
    inside the step, clips if configured, then calls
    `inner_optimizer.apply_gradients`; with no clipping training is
    bit-identical to the unwrapped optimizer. Under
    `with writer.as_default():` (outside XLA) it also writes what it
    recorded at that step.

    Args:
        inner_optimizer: The tf_keras optimizer to wrap
            (`tf.keras.optimizers.Adam(...)` under `TF_USE_LEGACY_KERAS=1`,
            or a `tf.keras.optimizers.legacy` one).
        config: A `MonitorConfig` (or a dict of its options).
        name: The optimizer's name; also the default `tag_scope`.
        step: The step variable statistics are recorded against (any int
            dtype), e.g. `agent.train_step_counter`. Defaults to the inner
            optimizer's `iterations`.
        **options: `MonitorConfig` options, overriding those of `config`.

    Example:

    ```python
    optimizer = keras_gradmon.wrap(tf.keras.optimizers.Adam(1e-3),
                                   every_n_steps=100, step=counter)
    agent = dqn_agent.DqnAgent(..., optimizer=optimizer,
                               train_step_counter=counter)
    with tf.summary.create_file_writer("logs").as_default():
        agent.train(experience)  # writes grad_norm/global every 100 steps
    ```
    """

    _HAS_AGGREGATE_GRAD = True

    def _accepts(self, optimizer: Any) -> bool:
        if isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
            raise ValueError(
                "`inner_optimizer` must not be a tf_keras LossScaleOptimizer: the "
                "tf_keras wrapper does not unscale gradients (mixed_float16 is "
                "supported with Keras 3 optimizers, see docs/distributed.md). "
                f"Received: inner_optimizer={optimizer!r}"
            )
        return is_tf_keras_optimizer(optimizer)

    def _init_base(self, name: str) -> None:
        _CLASSIC_BASE.__init__(self, name=name)

    @property
    def name(self) -> str:
        return self._name

    def _make_variable(
        self, name: str, shape: tuple, dtype: str, initial: float
    ) -> tf.Variable:
        return self.add_weight(
            name,
            shape=shape,
            dtype=tf.as_dtype(dtype),
            initializer=tf_keras.initializers.Constant(initial),
            trainable=False,
            synchronization=distribute.SYNCHRONIZATION,
            aggregation=distribute.AGGREGATION,
        )

    @unconverted
    def build(self, var_list: Iterable[tf.Variable]) -> None:
        """Creates the monitor's state (and the inner optimizer's), in the
        order the variables were created: both are checkpointed by position
        (a new-style optimizer's slots too), see `tf_v1.creation_order`."""
        if self.monitor.built:
            return
        var_list = self._place(var_list)
        inner = self.inner_optimizer
        # Under each optimizer's name, as its own apply_gradients would: the
        # inner one's variables are named as they are unwrapped ("Adam/m/...").
        inner_name = getattr(inner, "_name", None) or inner.name
        with tf.init_scope():
            with tf.name_scope(self.name):
                self.monitor.build(var_list, self._make_variable)
            with tf.name_scope(inner_name):
                if isinstance(inner, _NEW_BASE):
                    inner.build(var_list)
                else:
                    inner._create_all_weights(var_list)

    def step_variable(self) -> Any:
        return self.iterations if self._step is None else self._step

    def _create_all_weights(self, var_list: Iterable[tf.Variable]) -> None:
        self.build(var_list)

    @unconverted
    def apply_gradients(
        self, grads_and_vars: Iterable, name: str | None = None, **kwargs: Any
    ) -> Any:
        """Measures (and clips) the gradients, then applies them with the
        inner optimizer; returns what it returns.

        Under a multi-replica strategy the gradients are summed across the
        replicas here, once (unless the caller says they are, with
        `experimental_aggregate_gradients=False`), and the inner optimizer
        is told not to sum them again.
        """
        pairs = list(grads_and_vars)
        aggregated = kwargs.pop("skip_gradients_aggregation", False) or not (
            kwargs.pop("experimental_aggregate_gradients", True)
        )
        grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
        parts = None
        if not aggregated:
            parts = self._replicas(grads)
            grads = distribute.all_reduce_sum(grads)
        self.build(variables)
        indices = [self._row(v) for v in variables]
        step = tf.cast(self.iterations if self._step is None else self._step, tf.int64)
        done = self._process(step, grads, variables, indices, parts)
        kwargs["experimental_aggregate_gradients"] = False

        def apply(grads: list) -> Any:
            pairs = list(zip(grads, variables))
            return self.inner_optimizer.apply_gradients(pairs, name=name, **kwargs)

        def gated() -> Any:
            if done.apply is True:
                return apply(done.grads)
            distribute.apply_if(done.apply, apply, (done.grads,))
            return self.iterations

        return self._applied(step, done, grads, variables, indices, gated)

    # Delegation to the inner optimizer -----------------------------------------

    iterations = forwarded("iterations", writable=True)
    learning_rate = forwarded("learning_rate", writable=True)
    lr = forwarded("learning_rate", writable=True)
    clipnorm = forwarded("clipnorm")
    clipvalue = forwarded("clipvalue")
    global_clipnorm = forwarded("global_clipnorm")

    def variables(self) -> list:
        """This wrapper's variables, then the inner optimizer's."""
        inner = self.inner_optimizer.variables
        inner = inner() if callable(inner) else inner
        return list(self._weights) + list(inner)

    @property
    def weights(self) -> list:
        return self.variables()

    def get_slot_names(self) -> list[str]:
        """The inner optimizer's slot names (a classic optimizer's; a
        new-style one keeps no named slots)."""
        names = getattr(self.inner_optimizer, "get_slot_names", None)
        return list(names()) if names is not None else []

    def get_slot(self, var: tf.Variable, slot_name: str) -> tf.Variable:
        """The inner (classic) optimizer's slot `slot_name` of `var`."""
        if not isinstance(self.inner_optimizer, _CLASSIC_BASE):
            raise ValueError(
                "`get_slot` needs a classic tf_keras inner optimizer; a "
                "new-style one keeps its state in `variables`. Received: "
                f"inner_optimizer={self.inner_optimizer!r}"
            )
        return self.inner_optimizer.get_slot(var, slot_name)

    # Serialization: the inner optimizer with the framework's own functions.

    _serialize = staticmethod(tf_keras.optimizers.serialize)
    _deserialize = staticmethod(tf_keras.optimizers.deserialize)
