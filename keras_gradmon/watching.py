"""The ways in: `watch` a compiled model or an agent in one call, `wrap` an
optimizer yourself, and `write_summaries` in a custom loop.

Example:

```python
model.compile(optimizer="adam", loss="mse")
model.fit(x, y, callbacks=keras_gradmon.watch(model, "logs/train"))
```
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from keras_gradmon.alerts.delivery import ALERT_FIELDS, AlertChecker, AlertOptions
from keras_gradmon.alerts.events import Alert
from keras_gradmon.core.config import MonitorConfig, read_section
from keras_gradmon.hub import Hub
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from keras_gradmon.wrapping import (
    MonitoredOptimizer,
    check_not_monitored,
    find_monitored,
    kind_of,
    unsupported_error,
)
from keras_gradmon.writer import MonitorWriter

#: The attributes through which tf-agents' agents hold their optimizers,
#: and the tag scope each gets when an agent holds several.
AGENT_OPTIMIZERS = {
    "_optimizer": None,
    "_actor_optimizer": "actor",
    "_critic_optimizer": "critic",
    "_alpha_optimizer": "alpha",
}


class Watch(list):
    """What `watch` turned on. It is the list of callbacks to pass to
    `model.fit`; for an agent (or a custom loop) call `write()` after each
    train step instead.

    Attributes:
        optimizers: The monitored optimizers (one per optimizer watched).
        hub: Where every monitor's numbers go (TensorBoard at `log_dir`).

    Example:

    ```python
    watched = keras_gradmon.watch(agent, "logs/dqn")
    for experience in dataset:
        agent.train(experience)
        watched.write()
    ```
    """

    def __init__(
        self,
        callbacks: list,
        optimizers: list[MonitoredOptimizer],
        hub: Hub,
        checkers: list[AlertChecker] | None = None,
    ) -> None:
        super().__init__(callbacks)
        self.optimizers = list(optimizers)
        self.hub = hub
        self._checkers = list(checkers or [])

    @property
    def alerts(self) -> list[Alert]:
        """Every alert raised so far, by every monitor, in order of step."""
        found = [a for c in self for a in getattr(c, "alerts", [])]
        found += [a for checker in self._checkers for a in checker.history]
        return sorted(found, key=lambda alert: alert.step)

    def write(self) -> bool:
        """Writes what the optimizers recorded since the last call and runs
        the alert rules on it (for agents and custom loops; `fit` needs
        nothing); returns whether anything was written.

        Raises:
            GradientAlertError: When an alert's tier has the "raise" action.
        """
        fresh = False
        for optimizer in self.optimizers:
            fresh = MonitorWriter.of(optimizer.monitor).write() or fresh
        for checker in self._checkers:
            checker.check()
        return fresh

    @property
    def async_safe(self) -> bool:
        """Whether Keras may run these callbacks' batch-end hooks on a
        worker thread: `fit` asks it of each item of `callbacks=[...]`, a
        Watch among them, before flattening them (on JAX)."""
        import keras

        base = keras.callbacks.Callback
        hooks = (
            "on_batch_end",
            "on_train_batch_end",
            "on_test_batch_end",
            "on_predict_batch_end",
        )
        return all(
            getattr(callback, "async_safe", False)
            or all(getattr(type(callback), h) is getattr(base, h) for h in hooks)
            for callback in self
        )

    @property
    def stop_requested(self) -> bool:
        """Whether an alert whose action is "stop" fired (`write()`)."""
        return any(checker.stop_requested for checker in self._checkers)

    def close(self) -> None:
        """Writes what is left and closes the event files."""
        self.write()
        for checker in self._checkers:
            checker.close()
        self.hub.close()


def _flattened_by_keras(cls: type) -> None:
    """Has Keras's tree utility flatten `cls` (a list) into its items, as
    `fit(callbacks=...)` flattens its argument: to optree, which Keras 3
    uses, a list subclass is one leaf (which `fit` would then call as a
    callback) unless registered. (dm-tree flattens any sequence.)"""
    try:
        import optree
    except ImportError:
        return
    optree.register_pytree_node(
        cls,
        lambda watched: (list(watched), None),
        lambda _, callbacks: list(callbacks),
        namespace="keras",
    )


_flattened_by_keras(Watch)


def watch(
    target: Any,
    log_dir: str | os.PathLike | None = None,
    *,
    config: MonitorConfig | Mapping[str, Any] | str | os.PathLike | None = None,
    alerts: AlertOptions | Mapping[str, Any] | bool = True,
    activations: Any = None,
    clipping: Mapping[str, Any] | float | None = None,
    **options: Any,
) -> Watch:
    """Turns on the common job in one call: the gradient monitor on `target`'s
    optimizer, TensorBoard at `log_dir`, alerts; clipping, activations on request.

    Args:
        target: A compiled Keras model (its optimizer wrapped in place:
            call `watch` before `fit`), or a tf-agents agent (each optimizer
            it holds wrapped, recording against its `train_step_counter`:
            call it before the first `agent.train`).
        log_dir: Where TensorBoard's event file goes (every monitor's
            numbers, the alerts); None: nothing is written to disk.
        config: The gradient monitor's options: a `MonitorConfig`, a dict,
            or a JSON/YAML config file, whose `monitor`, `alerts` and
            `activations` sections configure all of it.
        alerts: An `AlertOptions` (or a dict of its fields), True for the
            defaults (or the config file's `alerts` section), False for none.
        activations: A probe batch of model inputs (a few hundred held-out
            samples), or an `ActivationOptions` / dict holding one, to watch
            the layers' activations too (Keras models).
        clipping: Clip the gradients: a `max_norm` (global-norm clipping) or
            a clipping config (`{"method": "autoclip"}`); None: as `config`.
        **options: `MonitorConfig` options (`every_n_steps=10`, ...).

    Returns:
        A `Watch`: the callbacks to pass to `fit`. Raises a `ValueError` for
        an uncompiled model or an optimizer that has trained already.

    Example:

    ```python
    model.compile(optimizer="adam", loss="mse", jit_compile=True)
    model.fit(x, y, callbacks=keras_gradmon.watch(model, "logs", clipping=1.0))
    ```
    """
    _check_activations(target, activations)
    monitor_config = _monitor_config(config, clipping, options)
    alert_options = _alert_options(config, alerts)
    hub = Hub([TensorBoardRecorder(log_dir)] if log_dir is not None else [])
    if _is_agent(target):
        return _watch_agent(target, monitor_config, alert_options, hub)
    return _watch_model(target, monitor_config, alert_options, hub, activations, config)


def _check_activations(target: Any, activations: Any) -> None:
    """Before anything is written: `activations` is for a Keras model."""
    if activations is not None and _is_agent(target):
        raise ValueError(
            "`activations` is for a Keras model; for an agent's network, "
            "use keras_gradmon.ActivationMonitor(network, batch) and call "
            "its `update(step)` after each train step. Received: "
            f"activations={type(activations).__name__}, target={target!r}"
        )


def _is_file(config: Any) -> bool:
    return isinstance(config, (str, os.PathLike))


def _alert_options(config: Any, alerts: Any) -> AlertOptions | None:
    """`alerts`, or the config file's `alerts` section where it is True."""
    file_section = alerts is True and _is_file(config)
    return AlertOptions.of(AlertOptions.build(config) if file_section else alerts)


def _monitor_config(config: Any, clipping: Any, options: dict) -> MonitorConfig:
    """The gradient monitor's options: `config` (a file's `monitor`
    section), `clipping` (a number is a global-norm `max_norm`) and the
    options one by one on top."""
    if _is_file(config):
        config = MonitorConfig.from_file(config)
    if clipping is not None:
        if isinstance(clipping, (int, float)) and not isinstance(clipping, bool):
            clipping = {"method": "global_norm", "max_norm": float(clipping)}
        options = {**options, "clipping": clipping}
    return MonitorConfig.resolve(config, options)


def _is_agent(target: Any) -> bool:
    return hasattr(target, "train_step_counter") and hasattr(target, "train")


def _watch_model(
    model: Any,
    config: MonitorConfig,
    alerts: AlertOptions | None,
    hub: Hub,
    activations: Any,
    file: Any,
) -> Watch:
    """`watch` of a compiled Keras model."""
    from keras_gradmon.callbacks import (
        ActivationMonitorCallback,
        GradientMonitorCallback,
    )

    optimizer = _model_optimizer(model, config)
    callbacks: list = [
        GradientMonitorCallback(hub=hub, alerts=alerts is not None and alerts)
    ]
    if activations is not None:
        data, chosen, activation_alerts = _activation_options(activations, file, alerts)
        callbacks.append(
            ActivationMonitorCallback(
                data, config=chosen, alerts=activation_alerts, hub=hub
            )
        )
    return Watch(callbacks, [optimizer], hub)


def _activation_options(
    activations: Any, file: Any, alerts: AlertOptions | None
) -> tuple[Any, Any, AlertOptions | bool]:
    """The activation callback's probe batch, config and alerts: `activations`
    (a probe batch, with the config file's `activations` section; or an
    `ActivationOptions` or dict holding one); the alerts are `alerts` but
    its rules (the gradients'), with the alert fields the activation options
    set themselves on top (an `ActivationOptions`: those that are not the
    defaults); alerts=False drops them."""
    from keras_gradmon.activations.monitor import ActivationOptions

    data, config = None, activations
    if isinstance(activations, ActivationOptions):
        defaults = AlertOptions()
        own = {
            name: getattr(activations, name)
            for name in ALERT_FIELDS
            if getattr(activations, name) != getattr(defaults, name)
        }
    else:
        if not isinstance(activations, Mapping):
            data, config = activations, {}
            if _is_file(file):
                config = read_section(os.fspath(file), "activations")
        config = dict(config)
        own = {name: config.pop(name) for name in ALERT_FIELDS if name in config}
    if alerts is None:
        return data, config, False
    shared = {**alerts.fields(), "rules": None}  # None: the activation rules
    return data, config, AlertOptions.of({**shared, **own})


def _model_optimizer(model: Any, config: MonitorConfig) -> MonitoredOptimizer:
    """`model`'s optimizer, wrapped in place (or already monitored)."""
    from keras_gradmon.keras3 import GradientMonitorOptimizer

    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or not hasattr(model, "compile"):
        raise ValueError(
            "`target` must be a compiled Keras model (or a tf-agents agent): "
            "watch wraps the optimizer `compile` gave it. Call "
            "`model.compile(optimizer=..., loss=...)` first. Received: "
            f"target={model!r}"
        )
    try:
        found = find_monitored(optimizer)
    except ValueError:
        found = None
    if found is not None:
        return found
    _check_fresh(optimizer, "model.optimizer")
    wrapper = GradientMonitorOptimizer(optimizer, config=config)
    model.optimizer = wrapper
    compiled = getattr(model, "_compile_config", None)
    if compiled is not None and "optimizer" in getattr(compiled, "config", {}):
        compiled.config["optimizer"] = wrapper  # saved and loaded wrapped
    model.train_function = None  # built again, with the wrapper
    return wrapper


def _check_fresh(optimizer: Any, argument: str) -> None:
    """Refuses an optimizer that holds state already: its train function was
    traced with it, and its slots would not be the wrapper's. (A tf_keras
    optimizer has no `built`; its `_iterations` counts its steps, read
    without creating it: a legacy one makes it on first read.)"""
    variables = getattr(optimizer, "variables", [])
    variables = variables() if callable(variables) else variables
    built = getattr(optimizer, "built", False) and len(variables) > 1
    iterations = getattr(optimizer, "_iterations", None)
    stepped = iterations is not None and int(np.asarray(iterations)) > 0
    if built or stepped or getattr(optimizer, "_slots", None):
        raise ValueError(
            f"`{argument}` has trained already (it holds state): call "
            "keras_gradmon.watch before the first train step, or wrap the "
            "optimizer yourself with keras_gradmon.wrap before compiling. "
            f"Received: {argument}={optimizer!r}"
        )


def _watch_agent(
    agent: Any, config: MonitorConfig, alerts: AlertOptions | None, hub: Hub
) -> Watch:
    """`watch` of a tf-agents agent: each optimizer it holds wrapped in place,
    written and checked by `Watch.write()`."""
    held = [a for a in AGENT_OPTIMIZERS if getattr(agent, a, None) is not None]
    if not held:
        raise ValueError(
            "`target` holds no optimizer (none of "
            f"{list(AGENT_OPTIMIZERS)}): it cannot be watched. Received: "
            f"target={agent!r}"
        )
    optimizers, checkers = [], []
    for attribute in held:
        scope = AGENT_OPTIMIZERS[attribute] if len(held) > 1 else None
        optimizer = _agent_optimizer(agent, attribute, config, scope)
        MonitorWriter.of(optimizer.monitor).link(hub)
        optimizers.append(optimizer)
        if alerts is not None:
            checkers.append(AlertChecker(optimizer, alerts=alerts, hub=hub))
    return Watch([], optimizers, hub, checkers)


def _agent_optimizer(
    agent: Any, attribute: str, config: MonitorConfig, scope: str | None
) -> MonitoredOptimizer:
    """The agent's optimizer at `attribute`, wrapped in place (or already
    monitored), recording against its train step counter."""
    optimizer = getattr(agent, attribute)
    try:
        return find_monitored(optimizer)
    except ValueError:
        pass
    _check_fresh(optimizer, f"agent.{attribute.lstrip('_')}")
    wrapper = wrap(optimizer, config, name=scope, step=agent.train_step_counter)
    setattr(agent, attribute, wrapper)
    return wrapper


def wrap(optimizer: Any, config: Any = None, name: str | None = None, **options: Any):
    """Wraps `optimizer` in the monitor adapter of its kind.

    Args:
        optimizer: A Keras 3, tf_keras or `tf.compat.v1.train` optimizer.
        config: A `MonitorConfig` (or a dict of its options).
        name: The wrapper's name; also its default `tag_scope`.
        **options: `MonitorConfig` options, and `step=` (an integer
            `tf.Variable` to record against) for tf_keras and
            `tf.compat.v1.train` optimizers.

    Returns:
        The wrapper: an optimizer of the same framework as `optimizer`.

    Raises:
        ValueError: For anything that is not an optimizer of a supported
            kind, or an optimizer that is already monitored.

    Example:

    >>> optimizer = keras_gradmon.wrap(
    ...     tf.compat.v1.train.AdamOptimizer(1e-3), every_n_steps=100
    ... )  # doctest: +SKIP
    """
    check_not_monitored(optimizer)
    kind = kind_of(optimizer)
    if kind == "keras3":
        from keras_gradmon.keras3 import GradientMonitorOptimizer

        if "step" in options:
            raise ValueError(
                "`step` is for tf_keras and tf.compat.v1.train optimizers; a "
                "Keras 3 wrapper records against the optimizer's `iterations`. "
                f"Received: step={options['step']!r}"
            )
        return GradientMonitorOptimizer(optimizer, config=config, name=name, **options)
    if kind is None:
        raise unsupported_error(optimizer)
    from keras_gradmon.legacy import wrapper_for

    return wrapper_for(optimizer, config, name, **options)


#: The hubs `write_summaries` links to each monitor's writer, by destination.
_destinations: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def write_summaries(optimizer: Any, writer: Any) -> bool:
    """Writes the statistics `optimizer` recorded since the last call.

    The one line a custom training loop needs after `apply_gradients`;
    what it writes is flushed to the event file at once. The monitor's one
    writer (`keras_gradmon.writer.MonitorWriter`) reads each summary once,
    so statistics already written are not written again, and calling it
    every step costs two small host reads on steps without fresh statistics.

    Args:
        optimizer: A monitored optimizer (any adapter), or an optimizer
            wrapping one.
        writer: A `tf.summary` writer (`tf.summary.create_file_writer(...)`)
            or a log directory.

    Returns:
        Whether anything was written.

    Example:

    ```python
    writer = tf.summary.create_file_writer("logs/train")
    for x, y in dataset:
        train_step(x, y)  # calls optimizer.apply_gradients(...)
        keras_gradmon.write_summaries(optimizer, writer)
    ```
    """
    monitored = find_monitored(optimizer)
    monitor_writer = MonitorWriter.of(monitored.monitor, monitored._monitor_name())
    hubs = _destinations.setdefault(monitored.monitor, {})
    key = writer if isinstance(writer, (str, os.PathLike)) else id(writer)
    if key not in hubs:
        recorder = (
            TensorBoardRecorder(writer=writer)
            if hasattr(writer, "as_default")
            else TensorBoardRecorder(log_dir=writer)
        )
        hubs[key] = monitor_writer.link(Hub([recorder]))
    return monitor_writer.write()
