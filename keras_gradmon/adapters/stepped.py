"""`StepAdapter`: what the adapters that record against a step variable of
the caller's (tf_keras, `tf.compat.v1.train`) share: the constructor, and
one monitor row per variable, in the order the variables were created."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from keras_gradmon.adapters.base import (
    MonitoredOptimizer,
    check_not_monitored,
    check_step,
    resolve_config,
)
from keras_gradmon.config import MonitorConfig
from keras_gradmon.monitor import GradientMonitor


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
            from keras_gradmon.adapters.kinds import unsupported_error

            raise unsupported_error(inner_optimizer, "inner_optimizer")
        check_not_monitored(inner_optimizer, "inner_optimizer")
        monitor_config = resolve_config(config, options, name)
        self._init_base(name or "GradientMonitorOptimizer")
        self.inner_optimizer = inner_optimizer
        self._track_trackable(inner_optimizer, "inner_optimizer")
        self.monitor = GradientMonitor(monitor_config)
        self._step = check_step(step)
        self._rows: dict[Any, int] = {}

    def _accepts(self, optimizer: Any) -> bool:
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
