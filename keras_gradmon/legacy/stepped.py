"""`StepAdapter`: what the adapters that record against a step variable of
the caller's (tf_keras, `tf.compat.v1.train`) share: the constructor, one
monitor row per variable, in the order the variables were created, and the
in-step work (measure, write), left out of a trace that does not measure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from keras_gradmon.backend import distribute
from keras_gradmon.backend.tensorflow import run_if
from keras_gradmon.core.config import MonitorConfig
from keras_gradmon.core.measurement import Due, Processed
from keras_gradmon.core.monitor import GradientMonitor, either_of, within
from keras_gradmon.core.noise_scale import replicas
from keras_gradmon.legacy.graph_writer import write_recorded
from keras_gradmon.schedule import measures
from keras_gradmon.wrapping import (
    MonitoredOptimizer,
    check_not_monitored,
    present_rows,
    resolve_config,
)


def make_tf_variable(
    name: str, shape: tuple, dtype: str, initial: float
) -> tf.Variable:
    """A non-trainable `tf.Variable`, one copy per replica under a strategy
    (see `keras_gradmon.backend.distribute`)."""
    return tf.Variable(
        tf.fill(shape, tf.cast(initial, dtype)),
        trainable=False,
        name=name,
        synchronization=distribute.SYNCHRONIZATION,
        aggregation=distribute.AGGREGATION,
    )


def check_step(step: Any) -> tf.Variable | None:
    """`step` if it is None or an integer `tf.Variable`."""
    if step is not None and not (
        isinstance(step, tf.Variable) and step.dtype.is_integer
    ):
        raise ValueError(
            "`step` must be an integer tf.Variable (such as "
            f"`agent.train_step_counter`) or None. Received: step={step!r}"
        )
    return step


def check_int64_step(step: Any, argument: str = "step") -> None:
    """Refuses an integer step variable other than int64: tf-agents' own
    summaries (`Losses/...`) need an int64 `train_step_counter`, and fail
    with an int32 one as soon as a summary writer is set, wrapped or not."""
    if step is None or not isinstance(step, tf.Variable) or step.dtype == tf.int64:
        return
    raise ValueError(
        f"`{argument}` must be an int64 tf.Variable: tf-agents' own summaries "
        "(`Losses/...`) fail with a step counter of another dtype as soon as a "
        f"summary writer is set, wrapped or not. Received: {argument}={step!r} "
        f"(dtype {step.dtype.name}). Create the counter as "
        "`tf.Variable(0, dtype=tf.int64)` and give the same variable to the "
        "agent (`train_step_counter=`) and to the wrapper (`step=`)."
    )


def creation_order(variable: Any) -> int:
    """A sort key: when `variable` was created (its handle's id, which
    increases). The monitor's rows (and a new-style inner optimizer's slots)
    are checkpointed by position, and agents pass their variables in an
    order of their own: TD3 and SAC list their critics' from a set, in
    object-id order, which differs between two processes. In creation order
    the rows come in the model's order, the same in every process that
    builds the agent alike, so a restored agent finds each variable's state
    in its row. (0 for a variable without a handle id: its order is kept.)"""
    try:
        return int(variable.handle._id)
    except Exception:  # no handle here (or no id): keep the order given
        return 0


class StepAdapter(MonitoredOptimizer):
    """The constructor and the variable rows of the adapters that record
    against a step variable of the caller's (tf_keras, `tf.compat.v1.train`).

    Subclasses say which inner optimizers they take (`_accepts`) and how
    their framework's base class is constructed (`_init_base`).
    """

    def __init__(
        self,
        inner_optimizer: Any,
        config: MonitorConfig | Mapping[str, Any] | None = None,
        name: str | None = None,
        step: Any = None,
        **options: Any,
    ) -> None:
        if not self._accepts(inner_optimizer):
            from keras_gradmon.wrapping import unsupported_error

            raise unsupported_error(inner_optimizer, "inner_optimizer")
        check_not_monitored(inner_optimizer, "inner_optimizer")
        monitor_config = resolve_config(config, options, name)
        self._init_base(name or "GradientMonitorOptimizer")
        self.inner_optimizer = inner_optimizer
        self._track_trackable(inner_optimizer, "inner_optimizer")
        self.monitor = GradientMonitor(monitor_config)
        self._step = check_step(step)
        check_int64_step(step)
        self._rows: dict[Any, int] = {}

    def _accepts(self, optimizer: Any) -> bool:
        raise NotImplementedError

    def _process(
        self,
        step: tf.Tensor,
        grads: list,
        variables: list,
        indices: list[int],
        parts: Any = None,
    ) -> Processed:
        """`monitor.process` (`parts`: the noise scale's, see
        `_replicas`), holding the weights before the update for the update
        ratios in its conditional where an update is ordered after it
        (`_ordered`); not in a trace under `measuring(False)` when the
        monitor has nothing to do on a step that is not due."""
        monitor = self.monitor
        if not measures() and not monitor.works_every_step:
            return Processed(list(grads), True, Due(False, False))
        hold = (variables, indices) if _ordered() else None
        with tf.name_scope(self.name):
            return monitor.process(step, grads, indices, parts=parts, hold=hold)

    def _replicas(self, grads: list) -> Any:
        """The replicas' parts of this replica's `grads` for the noise
        scale, before they are summed; None when off or on one replica."""
        count = distribute.replicas_in_sync()
        if self.monitor.signals.noise is None or count < 2:
            return None
        return replicas(grads, count, None)

    def _applied(
        self,
        step: tf.Tensor,
        done: Processed,
        grads: list,
        variables: list,
        indices: list[int],
        apply: Callable[[], Any],
    ) -> Any:
        """`apply()` (the inner optimizer's update), the update/weight
        ratios measured around it (inside a `tf.function` or eagerly: a
        TF1 graph orders nothing after it), then the in-graph write of what
        the step recorded, both in one conditional after the update (what a
        step with nothing due runs of it: that test alone). Returns what
        `apply()` returns."""
        monitor, before = self.monitor, done.before
        # The step's value now: the update may advance it (a cast to its own
        # dtype returns the variable itself).
        step = tf.convert_to_tensor(step)
        result = apply()
        present = present_rows(grads, indices)
        either = either_of(done.due)

        def recorded() -> None:
            due = within(done.due, either)
            monitor.record_updates(due, before, variables, indices)
            write_recorded(monitor, step, due, present, self.name)

        with tf.name_scope(self.name):
            run_if(either, recorded)
        return result

    def step_variable(self) -> Any:
        """The variable whose value is the step the next `apply_gradients`
        records against, when it gets no `global_step`: `step=`, else the
        wrapper's own count."""
        raise NotImplementedError

    def _init_base(self, name: str) -> None:
        raise NotImplementedError

    def _place(self, variables: Sequence[Any]) -> list:
        """`variables` in creation order, each given its monitor row."""
        ordered = sorted(variables, key=creation_order)
        self._rows.update({v.ref(): i for i, v in enumerate(ordered)})
        return ordered

    def _row(self, variable: Any) -> int:
        if variable.ref() not in self._rows:
            raise ValueError(
                f"{type(self).__name__} {self._monitor_name()!r} was built for "
                "the variables of its first `apply_gradients` call and got "
                f"another one: variable={variable.name!r}. Use one wrapper per "
                "variable set."
            )
        return self._rows[variable.ref()]

    def __dir__(self) -> list[str]:
        # TensorFlow's checkpointing finds slot owners by
        # `"get_slot_names" in dir(obj)`; the inner optimizer (a child of
        # this one) owns the slots, and listing them twice is an error.
        return [n for n in super().__dir__() if n != "get_slot_names"]


def _ordered() -> bool:
    """Whether the update ratios can be measured around the update: inside
    a `tf.function` or eagerly (a TF1 graph orders nothing after it)."""
    return tf.inside_function() or tf.executing_eagerly()
