"""`V1GradientMonitorOptimizer`: the adapter for `tf.compat.v1.train`
optimizers, which tf-agents' own training examples pass to their agents
(`tf.compat.v1.train.AdamOptimizer(learning_rate=...)`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from keras_gradmon.backend import distribute
from keras_gradmon.backend.tensorflow import unconverted
from keras_gradmon.legacy.stepped import StepAdapter, make_tf_variable

_V1_BASE = tf.compat.v1.train.Optimizer


def is_v1_optimizer(optimizer: Any) -> bool:
    """Whether `optimizer` is a `tf.compat.v1.train.Optimizer`."""
    return isinstance(optimizer, _V1_BASE)


class V1GradientMonitorOptimizer(StepAdapter, _V1_BASE):
    """Wraps a `tf.compat.v1.train` optimizer and records gradient statistics.

    It is itself a `tf.compat.v1.train.Optimizer` (`apply_gradients(
    grads_and_vars, global_step=None, name=None)`, `minimize`,
    `compute_gradients`, `get_slot`, `get_slot_names`, `variables()`), so it
    goes wherever the inner one goes: eagerly, in `tf.function` /
    `common.function`, and under XLA where the inner optimizer compiles.
    It measures the gradients, clips if configured, skips non-finite steps
    with `skip_nonfinite`, then calls the inner `apply_gradients`. Under
    `with writer.as_default():` (outside XLA) it writes what it recorded.
    `tf.train.Checkpoint` holds the inner optimizer's slots and the
    monitor's state.

    The step the statistics are recorded against is `global_step` when
    `apply_gradients` gets one, else `step=`, else the wrapper's own count
    of `apply_gradients` calls.

    Args:
        inner_optimizer: The `tf.compat.v1.train.Optimizer` to wrap.
        config: A `MonitorConfig` (or a dict of its options).
        name: The optimizer's name; also the default `tag_scope`.
        step: An integer `tf.Variable` to record against (e.g. the agent's
            `train_step_counter`), used when no `global_step` is passed.
        **options: `MonitorConfig` options, overriding those of `config`.

    Example:

    ```python
    optimizer = keras_gradmon.wrap(
        tf.compat.v1.train.AdamOptimizer(1e-3), every_n_steps=100, step=counter)
    agent = dqn_agent.DqnAgent(..., optimizer=optimizer,
                               train_step_counter=counter)
    ```
    """

    def _accepts(self, optimizer: Any) -> bool:
        return is_v1_optimizer(optimizer)

    def _init_base(self, name: str) -> None:
        _V1_BASE.__init__(self, use_locking=False, name=name)
        self._counter: tf.Variable | None = None
        self._monitor_variables: list[tf.Variable] = []

    @property
    def name(self) -> str:
        return self.get_name()

    def _make_variable(
        self, name: str, shape: tuple, dtype: str, initial: float
    ) -> tf.Variable:
        variable = make_tf_variable(f"{self.get_name()}/{name}", shape, dtype, initial)
        self._track_trackable(variable, name)
        self._monitor_variables.append(variable)
        return variable

    def _build(self, variables: list[tf.Variable]) -> None:
        """Creates the monitor's state, one row per variable in the order the
        variables were created (see `creation_order`)."""
        if self.monitor.built:
            return
        with tf.init_scope():
            self.monitor.build(self._place(variables), self._make_variable)
            if self._step is None:
                self._counter = self._make_variable("apply_count", (), "int64", 0)

    def compute_gradients(self, loss: Any, var_list: Any = None, **kwargs: Any) -> list:
        """The inner optimizer's `compute_gradients`."""
        return self.inner_optimizer.compute_gradients(loss, var_list=var_list, **kwargs)

    @unconverted
    def apply_gradients(
        self, grads_and_vars: Iterable, global_step: Any = None, name: str | None = None
    ) -> Any:
        """Measures (and clips) the gradients, then applies them with the
        inner optimizer; returns what it returns (or, with `skip_nonfinite`,
        a tensor whose evaluation runs the conditional update)."""
        if distribute.replicas_in_sync() > 1:
            raise NotImplementedError(
                "tf.compat.v1.train optimizers sum the replicas' gradients "
                "inside `apply_gradients`, so keras_gradmon cannot measure the "
                "summed gradient there. Under a multi-replica strategy, wrap a "
                "Keras or tf_keras optimizer instead. Received: "
                f"inner_optimizer={self.inner_optimizer!r}"
            )
        pairs = list(grads_and_vars)
        grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
        self._build(variables)
        indices = [self._row(v) for v in variables]
        step = tf.cast(tf.convert_to_tensor(self._step_source(global_step)), tf.int64)
        done = self._process(step, grads, variables, indices)

        def apply() -> Any:
            updates = list(zip(done.grads, variables))
            return self.inner_optimizer.apply_gradients(updates, global_step, name)

        def gated() -> Any:
            if done.apply is True:
                return apply()
            return tf.cond(done.apply, lambda: _ran(apply), lambda: tf.constant(False))

        result = self._applied(step, done, grads, variables, indices, gated)
        if self._counter is None:
            return result
        with tf.control_dependencies([] if result is None else [result]):
            return self._counter.assign_add(1)

    def step_variable(self) -> Any:
        return self._step if self._step is not None else self._counter

    def _step_source(self, global_step: Any) -> Any:
        if global_step is not None:
            return global_step
        return self._step if self._step is not None else self._counter

    # Delegation to the inner optimizer -----------------------------------------

    def get_slot(self, var: tf.Variable, name: str) -> tf.Variable | None:
        """The inner optimizer's slot `name` of `var`."""
        return self.inner_optimizer.get_slot(var, name)

    def get_slot_names(self) -> list[str]:
        """The inner optimizer's slot names."""
        return self.inner_optimizer.get_slot_names()

    def variables(self) -> list[tf.Variable]:
        """The monitor's variables, then the inner optimizer's."""
        return list(self._monitor_variables) + list(self.inner_optimizer.variables())


def _ran(fn: Any) -> tf.Tensor:
    fn()
    return tf.constant(True)
