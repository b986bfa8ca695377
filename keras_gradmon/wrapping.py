"""What every wrapper shares, written once: delegation to the inner
optimizer (`forwarded`), the options a wrapper is built from
(`resolve_config`), the double-wrap check, reading back what it recorded
(`MonitoredOptimizer`), its serialization, and which kind of optimizer
this is, so which wrapper wraps it (`kind_of`: nothing is imported for it;
an optimizer of a library that was never imported cannot exist, so only
the libraries already loaded are asked).

The wrappers: `keras3.GradientMonitorOptimizer` (Keras 3 optimizers),
`legacy.tf_keras.TfKerasGradientMonitorOptimizer` (tf_keras optimizers)
and `legacy.tf_v1.V1GradientMonitorOptimizer` (`tf.compat.v1.train`
optimizers); `keras_gradmon.wrap` picks the one of an optimizer's kind.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from keras_gradmon.columns import HistogramSnapshot, Snapshot
from keras_gradmon.core.config import MonitorConfig
from keras_gradmon.core.monitor import GradientMonitor

_NOT_A_SCOPE = re.compile(r"[^A-Za-z0-9_.\-]+")


def forwarded(name: str, writable: bool = False, doc: str | None = None) -> property:
    """A property that reads `self.inner_optimizer.<name>` (and, if
    `writable`, assigns it there). Read-only ones accept the assignments
    a base class makes while the wrapper is being constructed, before
    `inner_optimizer` exists, and refuse them afterwards. Within
    `own_view(self)` it reads None: the wrapper's base class then sees its
    own (unset) settings, not the inner optimizer's.

    Example:

    >>> class Wrapper:
    ...     learning_rate = forwarded("learning_rate", writable=True)
    """

    def get(self: Any) -> Any:
        inner = self.__dict__.get("inner_optimizer")
        if inner is None or self.__dict__.get("_own_view"):
            return None  # constructing, or the base class asking for its own
        return getattr(inner, name)

    def set(self: Any, value: Any) -> None:
        inner = self.__dict__.get("inner_optimizer")
        if inner is None:  # a base constructor's default: nothing to pass on
            return
        if not writable:
            raise AttributeError(
                f"`{name}` of {type(self).__name__} is its inner optimizer's "
                f"and is read-only here: set it on `inner_optimizer`. "
                f"Received: {name}={value!r}"
            )
        setattr(inner, name, value)

    return property(get, set, doc=doc or f"The inner optimizer's `{name}`.")


@contextlib.contextmanager
def own_view(wrapper: Any) -> Iterator[None]:
    """Within, `forwarded` properties of `wrapper` read None, so that its
    base class does not act on the inner optimizer's settings (create EMA or
    gradient-accumulation variables of its own, say)."""
    wrapper.__dict__["_own_view"] = True
    try:
        yield
    finally:
        wrapper.__dict__.pop("_own_view", None)


def resolve_config(
    config: MonitorConfig | Mapping[str, Any] | None,
    options: Mapping[str, Any],
    name: str | None,
) -> MonitorConfig:
    """The config of a wrapper: `config` with `options` on top, and, when the
    user named the wrapper but gave no `tag_scope`, the name as tag scope
    (characters a tag scope cannot hold become '_'), so that an actor's and a
    critic's tags never collide.

    Example:

    >>> resolve_config(None, {}, name="actor").tag_scope
    'actor'
    """
    resolved = MonitorConfig.resolve(config, options)
    if name is None or resolved.tag_scope is not None or "tag_scope" in options:
        return resolved
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"`name` must be a non-empty string or None. Received: name={name!r}"
        )
    return resolved.replace(tag_scope=_NOT_A_SCOPE.sub("_", name))


def find_monitor(optimizer: Any) -> GradientMonitor | None:
    """The `GradientMonitor` of `optimizer` or of an optimizer it wraps."""
    current = optimizer
    for _ in range(8):
        monitor = getattr(current, "monitor", None)
        if isinstance(monitor, GradientMonitor):
            return monitor
        current = getattr(current, "inner_optimizer", None) or getattr(
            current, "_optimizer", None
        )
        if current is None:
            return None
    return None


def check_not_monitored(optimizer: Any, argument: str = "optimizer") -> None:
    """Refuses to wrap an optimizer that already holds a monitor: both would
    record the same statistics, and clip twice."""
    from keras_gradmon.wrapping import SUPPORTED

    if find_monitor(optimizer) is not None:
        raise ValueError(
            f"`{argument}` is already monitored by keras_gradmon (a "
            "GradientMonitorOptimizer, possibly inside another wrapper). It must "
            f"be a plain optimizer: {SUPPORTED}. Wrap the plain optimizer once "
            "and pass every monitor option to that one wrapper. Received: "
            f"{argument}={optimizer!r}"
        )


def present_rows(grads: list[Any], indices: list[int]) -> set[int]:
    """The rows of the variables that have a gradient (known at trace time)."""
    return {i for g, i in zip(grads, indices) if g is not None}


class ConfigFromInner:
    """`get_config` / `from_config` of a Keras-serializable wrapper: its name,
    the inner optimizer serialized with the framework's own functions (the
    class attributes `_serialize` and `_deserialize`), and the monitor's
    options."""

    _serialize: Callable[[Any], Any]
    _deserialize: Callable[..., Any]

    def get_config(self) -> dict:
        return serialized(self, type(self)._serialize)

    @classmethod
    def from_config(cls, config: dict, custom_objects: Any = None) -> Any:
        return deserialized(cls, config, cls._deserialize, custom_objects)


class MonitoredOptimizer:
    """What every wrapper offers: its `monitor`, its options, and reading back
    what it recorded."""

    monitor: GradientMonitor

    @property
    def monitor_config(self) -> MonitorConfig:
        """The monitor's options."""
        return self.monitor.config

    def snapshot(self) -> Snapshot:
        """The latest recorded scalar statistics, as NumPy data.

        Example:

        >>> optimizer.snapshot().totals["grad_norm"]  # doctest: +SKIP
        0.8123
        """
        self._check_monitor_built()
        return self.monitor.snapshot()

    def histogram_snapshot(self) -> HistogramSnapshot | None:
        """The latest recorded histograms, or None if histograms are off."""
        self._check_monitor_built()
        return self.monitor.histogram_snapshot()

    def _check_monitor_built(self) -> None:
        if not self.monitor.built:
            raise ValueError(
                f"{type(self).__name__} {self._monitor_name()!r} has recorded "
                "nothing yet: it is built on the first train step (or by "
                "`optimizer.build(variables)`)."
            )

    def _monitor_name(self) -> str:
        name = getattr(self, "name", None)
        return name if isinstance(name, str) else type(self).__name__


def find_monitored(optimizer: Any) -> MonitoredOptimizer:
    """The monitored wrapper in `optimizer` or among its inner optimizers.

    Raises:
        ValueError: If there is none, or if a `LossScaleOptimizer` wraps it
            (the monitor must wrap the loss scaler, see `loss_scale`).
    """
    from keras_gradmon.core import loss_scale

    current = optimizer
    for _ in range(8):
        if isinstance(current, MonitoredOptimizer):
            return current
        if loss_scale.is_loss_scaler(current):
            inner = getattr(current, "inner_optimizer", None)
            if isinstance(inner, MonitoredOptimizer):
                raise loss_scale.wrapped_monitor_error(optimizer)
        current = getattr(current, "inner_optimizer", None)
        if current is None:
            break
    raise ValueError(
        "Expected an optimizer monitored by keras_gradmon (from "
        "`keras_gradmon.wrap` or `GradientMonitorOptimizer`), or an "
        f"optimizer wrapping one. Received: optimizer={optimizer!r}"
    )


def serialized(wrapper: Any, serialize: Callable[[Any], Any]) -> dict:
    """A wrapper's config: its name, the serialized inner optimizer and the
    monitor's options (the base optimizer's own are the inner one's)."""
    return {
        "name": wrapper.name,
        "inner_optimizer": serialize(wrapper.inner_optimizer),
        "config": wrapper.monitor.config.to_serializable_dict(),
    }


def deserialized(
    cls: type, config: dict, deserialize: Callable[..., Any], custom_objects: Any
) -> Any:
    """The wrapper of `serialized`'s `config`. The saved tag scope is passed
    as saved: a name Keras made up is not a tag scope."""
    config = dict(config)
    options = config.pop("config", None) or {}
    inner = deserialize(config.pop("inner_optimizer"), custom_objects=custom_objects)
    return cls(inner, config=options, tag_scope=options.get("tag_scope"), **config)


def set_variables(wrapper: Any, weights: list) -> None:
    """`wrapper.set_weights(weights)` over all its `variables` (the inner
    optimizer's too), in the order `variables` lists them."""
    if not wrapper.built:
        raise ValueError(
            "You are calling `set_weights()` on an optimizer that has not "
            "yet been built. Call `optimizer.build(trainable_variables)` first."
        )
    variables = wrapper.variables
    if len(weights) != len(variables):
        raise ValueError(
            f"`weights` must hold {len(variables)} arrays (this wrapper's and "
            "its inner optimizer's variables, in the order of `variables`). "
            f"Received: {len(weights)} arrays"
        )
    for variable, weight in zip(variables, weights):
        if tuple(variable.shape) != tuple(weight.shape):
            raise ValueError(
                f"Optimizer variable {variable.path} has shape {variable.shape}, "
                f"not compatible with the provided weight shape {weight.shape}."
            )
        variable.assign(weight)


#: The kinds `wrap` accepts, as the error messages list them.
SUPPORTED = (
    "a Keras 3 optimizer (`keras.optimizers.Adam(...)`), a tf_keras optimizer "
    "(`tf.keras.optimizers.Adam(...)` under TF_USE_LEGACY_KERAS=1, new-style or "
    "`tf.keras.optimizers.legacy`), or a `tf.compat.v1.train.Optimizer` "
    "(`tf.compat.v1.train.AdamOptimizer(...)`)"
)


def kind_of(optimizer: Any) -> str | None:
    """ "keras3", "tf_keras" or "tf_v1", or None for anything else.

    Example:

    >>> kind_of(tf.compat.v1.train.AdamOptimizer(1e-3))  # doctest: +SKIP
    'tf_v1'
    """
    keras = sys.modules.get("keras")
    optimizers = getattr(keras, "optimizers", None)
    if optimizers is not None and isinstance(optimizer, optimizers.Optimizer):
        return "keras3"
    tf_keras = sys.modules.get("tf_keras")
    if tf_keras is not None and isinstance(
        optimizer,
        (tf_keras.optimizers.Optimizer, tf_keras.optimizers.legacy.Optimizer),
    ):
        return "tf_keras"
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(optimizer, tf.compat.v1.train.Optimizer):
        return "tf_v1"
    return None


def unsupported_error(optimizer: Any, argument: str = "optimizer") -> ValueError:
    """The error for an `optimizer` no adapter wraps, naming the `argument`
    it came in."""
    hint = ""
    if isinstance(optimizer, str):
        hint = " (a name: construct the optimizer first)"
    return ValueError(
        f"`{argument}` must be {SUPPORTED}{hint}. Received: {argument}="
        f"{optimizer!r} (of type {type(optimizer).__module__}."
        f"{type(optimizer).__qualname__})"
    )
