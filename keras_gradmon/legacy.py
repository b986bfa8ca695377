"""`LegacyGradientMonitorOptimizer`: the gradient monitor for tf_keras
optimizers, as tf-agents uses them (`TF_USE_LEGACY_KERAS=1`).

It is a `tf.keras.optimizers.Optimizer` (the tf_keras one), so tf-agents
agents take it where they take `tf.keras.optimizers.Adam(...)`; they call its
`apply_gradients(grads_and_vars)`. Under a default `tf.summary` writer it
writes the statistics from inside the train step, as tf-agents' own
summaries are written.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterable
from typing import Any

import tensorflow as tf
import tf_keras

from keras_gradmon import distribute
from keras_gradmon.config import MonitorConfig
from keras_gradmon.monitor import (
    GradientMonitor,
    MonitoredOptimizer,
    make_tf_variable,
)
from keras_gradmon.recorders.graph_writer import (
    summaries_enabled,
    write_recorded,
)

_NEW_BASE = tf_keras.optimizers.Optimizer
_LEGACY_BASE = tf_keras.optimizers.legacy.Optimizer

# Live wrappers by id, for `_LegacyConversion` (see there).
_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_IDS = itertools.count()


def is_tf_keras_optimizer(optimizer: Any) -> bool:
    """Whether `optimizer` is a tf_keras optimizer (new-style or legacy)."""
    return isinstance(optimizer, (_NEW_BASE, _LEGACY_BASE))


@tf_keras.saving.register_keras_serializable(package="keras_gradmon")
class LegacyGradientMonitorOptimizer(MonitoredOptimizer, _NEW_BASE):
    """Wraps a tf_keras optimizer and records gradient statistics in the step.

    The tf_keras counterpart of `GradientMonitorOptimizer` (which returns one
    of these when given a tf_keras optimizer). On summary steps it computes
    the statistics inside the step, clips if configured, then calls
    `inner_optimizer.apply_gradients`; with no clipping training is
    bit-identical to the unwrapped optimizer. Under `with
    writer.as_default():` (outside XLA) it also writes the statistics it
    recorded at that step, with the tags of `keras_gradmon.tags`.

    Args:
        inner_optimizer: The tf_keras optimizer to wrap
            (`tf.keras.optimizers.Adam(...)` under `TF_USE_LEGACY_KERAS=1`,
            or a `tf.keras.optimizers.legacy` one).
        config: A `MonitorConfig` (or a dict of its options).
        name: The optimizer's name.
        step: The step variable statistics are recorded against (any int
            dtype), e.g. `agent.train_step_counter`. Defaults to the inner
            optimizer's `iterations`.
        **options: `MonitorConfig` options, overriding those of `config`.

    Example:

    ```python
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        tf.keras.optimizers.Adam(1e-3), every_n_steps=100
    )
    agent = dqn_agent.DqnAgent(..., optimizer=optimizer,
                               train_step_counter=counter)
    with tf.summary.create_file_writer("logs").as_default():
        agent.train(experience)  # writes grad_norm/global every 100 steps
    ```
    """

    def __init__(
        self,
        inner_optimizer: Any,
        config: MonitorConfig | dict | None = None,
        name: str | None = None,
        step: tf.Variable | None = None,
        **options: Any,
    ) -> None:
        if not is_tf_keras_optimizer(inner_optimizer):
            raise ValueError(
                "`inner_optimizer` must be a tf_keras optimizer "
                "(`tf_keras.optimizers.Optimizer` or "
                "`tf_keras.optimizers.legacy.Optimizer`). Received: "
                f"inner_optimizer={inner_optimizer!r} "
                f"(of type {type(inner_optimizer).__name__})"
            )
        if isinstance(inner_optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
            raise ValueError(
                "`inner_optimizer` must not be a tf_keras LossScaleOptimizer: the "
                "tf_keras wrapper does not unscale gradients (mixed_float16 is "
                "supported with Keras 3 optimizers, see docs/distributed.md). "
                f"Received: inner_optimizer={inner_optimizer!r}"
            )
        if step is not None and not (
            isinstance(step, tf.Variable) and step.dtype.is_integer
        ):
            raise ValueError(
                "`step` must be an integer tf.Variable (such as "
                f"`agent.train_step_counter`) or None. Received: step={step!r}"
            )
        monitor_config = MonitorConfig.resolve(config, options)
        super().__init__(name=name or "GradientMonitorOptimizer", jit_compile=False)
        self.inner_optimizer = inner_optimizer
        self.monitor_config = monitor_config
        self.monitor = GradientMonitor(monitor_config)
        self._step = self._no_dependency(step)
        self._indices: dict[Any, int] = self._no_dependency({})
        self._live_id = next(_IDS)
        _LIVE[self._live_id] = self

    def _create_iteration_variable(self) -> None:
        # The inner optimizer's `iterations` is ours.
        pass

    def _make_variable(
        self, name: str, shape: tuple, dtype: str, initial: float
    ) -> tf.Variable:
        variable = make_tf_variable(f"{self.name}/{name}", shape, dtype, initial)
        self._variables.append(variable)
        return variable

    def build(self, var_list: Iterable[tf.Variable]) -> None:
        """Creates the monitor's state (and the inner optimizer's) for `var_list`."""
        if self.monitor.built:
            return
        var_list = list(var_list)
        with tf.init_scope():
            self.monitor.build(var_list, self._make_variable)
            if isinstance(self.inner_optimizer, _NEW_BASE):
                self.inner_optimizer.build(var_list)
            else:
                self.inner_optimizer._create_all_weights(var_list)
        self._indices.update(
            {self._var_key(v): i for i, v in enumerate(self.monitor.variables)}
        )
        self._built = True

    def apply_gradients(
        self, grads_and_vars: Iterable, name: str | None = None, **kwargs: Any
    ) -> Any:
        """Records statistics of the gradients, then applies them with the
        inner optimizer (see the class docstring). Returns what it returns.

        Under a multi-replica strategy the gradients are summed across the
        replicas here, once (unless the caller says they are, with
        `skip_gradients_aggregation=True`), and the inner optimizer is told
        not to sum them again.
        """
        grads_and_vars = list(grads_and_vars)
        aggregated = kwargs.pop("skip_gradients_aggregation", False) or not (
            kwargs.pop("experimental_aggregate_gradients", True)
        )
        grads = [g for g, _ in grads_and_vars]
        if not aggregated:
            grads = distribute.all_reduce_sum(grads)
        variables = [v for _, v in grads_and_vars]
        if not self.monitor.built:
            self.build(variables)
        indices = [self._index(v) for v in variables]
        step = tf.cast(self.iterations if self._step is None else self._step, tf.int64)
        after = None
        if summaries_enabled():
            present = {i for g, i in zip(grads, indices) if g is not None}

            def after(kind: str) -> None:
                write_recorded(self.monitor, kind, step, present)

        with tf.name_scope(self.name):
            grads, finite = self.monitor.record(step, grads, indices, after=after)
        # Both tf_keras optimizer kinds take this (the new one in **kwargs).
        kwargs["experimental_aggregate_gradients"] = False

        def apply(grads: list, variables: list) -> Any:
            pairs = list(zip(grads, variables))
            return self.inner_optimizer.apply_gradients(pairs, name=name, **kwargs)

        if not self.monitor_config.skip_nonfinite:
            return apply(grads, variables)
        distribute.apply_if(finite, apply, (grads, variables))
        return self.iterations

    def _index(self, variable: tf.Variable) -> int:
        key = self._var_key(variable)
        if key not in self._indices:
            raise ValueError(
                f"{type(self).__name__} {self.name!r} was built for the variables "
                f"of its first `apply_gradients` call and got another one: "
                f"variable={variable.name!r}. Use one wrapper per variable set."
            )
        return self._indices[key]

    # Delegation to the inner optimizer -----------------------------------------

    @property
    def iterations(self) -> tf.Variable:
        return self.inner_optimizer.iterations

    @iterations.setter
    def iterations(self, variable: tf.Variable) -> None:
        self.inner_optimizer.iterations = variable

    @property
    def learning_rate(self) -> Any:
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate: Any) -> None:
        self.inner_optimizer.learning_rate = learning_rate

    @property
    def lr(self) -> Any:
        return self.learning_rate

    @property
    def variables(self) -> list:
        inner = self.inner_optimizer.variables
        inner = inner() if callable(inner) else inner
        return list(self._variables) + list(inner)

    def get_config(self) -> dict:
        config = self.monitor_config.to_serializable_dict()
        return {
            "name": self.name,
            "inner_optimizer": tf_keras.optimizers.serialize(self.inner_optimizer),
            "config": config,
            "live_id": self._live_id,
        }

    @classmethod
    def from_config(
        cls, config: dict, custom_objects: Any = None
    ) -> LegacyGradientMonitorOptimizer:
        config = dict(config)
        config.pop("live_id", None)
        inner = tf_keras.optimizers.deserialize(
            config.pop("inner_optimizer"), custom_objects=custom_objects
        )
        return cls(inner, **config)


class _LegacyConversion:
    """What SacAgent's `convert_to_legacy_optimizer` resolves the wrapper to.

    tf-agents' SacAgent passes every new-style tf_keras optimizer through
    `tf.keras.__internal__.optimizers.convert_to_legacy_optimizer`, which
    rebuilds it from `get_config()` under its lower-cased class name. This
    returns the same wrapper (so the caller's reference keeps working) with
    its inner optimizer converted to the legacy one, as SAC wants.
    """

    @classmethod
    def from_config(
        cls, config: dict, custom_objects: Any = None
    ) -> LegacyGradientMonitorOptimizer:
        live = _LIVE.get(config.get("live_id"))
        if live is None:
            return LegacyGradientMonitorOptimizer.from_config(config, custom_objects)
        inner = live.inner_optimizer
        if isinstance(inner, _NEW_BASE) and not live.monitor.built:
            live.inner_optimizer = (
                tf_keras.__internal__.optimizers.convert_to_legacy_optimizer(inner)
            )
        return live


tf_keras.utils.get_custom_objects()[LegacyGradientMonitorOptimizer.__name__.lower()] = (
    _LegacyConversion
)
