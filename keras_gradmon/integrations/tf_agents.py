"""Helpers for tf-agents: wrap every optimizer an agent class takes, and
convert optimizers the way SacAgent does. Nothing here runs on import.

Example:

```python
from keras_gradmon.integrations import tf_agents as gradmon_agents

MonitoredSac = gradmon_agents.monitored(sac_agent.SacAgent, every_n_steps=100)
agent = MonitoredSac(time_step_spec, action_spec, actor_network=..., ...,
                     actor_optimizer=tf.keras.optimizers.Adam(3e-4), ...)
agent.actor_optimizer.snapshot()  # the wrapper; tags under grad_norm/actor/...
```
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

import tensorflow as tf

from keras_gradmon.adapters import wrap
from keras_gradmon.adapters.base import MonitoredOptimizer, find_monitor

#: The constructor arguments through which tf-agents' agents take
#: optimizers, and the tag scope each gets when an agent takes several.
OPTIMIZER_ARGUMENTS = {
    "optimizer": None,
    "actor_optimizer": "actor",
    "critic_optimizer": "critic",
    "alpha_optimizer": "alpha",
}


def converts_to_legacy(agent_class: type) -> bool:
    """Whether `agent_class` converts new-style tf_keras optimizers to
    classic ones, as SacAgent (and CqlSacAgent) do."""
    return any(
        "_convert_optimizer_to_legacy" in vars(cls) for cls in agent_class.__mro__
    )


def convert_like_sac(optimizer: Any) -> Any:
    """What SacAgent's `_convert_optimizer_to_legacy` makes of `optimizer`,
    also for a monitored one: a new-style tf_keras optimizer becomes its
    classic counterpart (`tf.keras.__internal__.optimizers.
    convert_to_legacy_optimizer`), inside the wrapper if wrapped. The
    wrapper itself is returned, so references to it stay valid.

    Example:

    >>> actor = convert_like_sac(keras_gradmon.wrap(tf.keras.optimizers.Adam(),
    ...                                             name="actor"))  # doctest: +SKIP
    """
    tf_keras = sys.modules.get("tf_keras")
    if tf_keras is None:
        return optimizer
    convert = tf_keras.__internal__.optimizers.convert_to_legacy_optimizer
    new_style = tf_keras.optimizers.Optimizer
    if isinstance(optimizer, MonitoredOptimizer):
        inner = optimizer.inner_optimizer
        if isinstance(inner, new_style):
            if optimizer.monitor.built:
                raise ValueError(
                    "`optimizer` has applied gradients already; convert its "
                    f"inner optimizer before training. Received: {optimizer!r}"
                )
            optimizer.inner_optimizer = convert(inner)
            optimizer._track_trackable(
                optimizer.inner_optimizer, "inner_optimizer", overwrite=True
            )
        return optimizer
    return convert(optimizer) if isinstance(optimizer, new_style) else optimizer


def _check_plain(optimizer: Any, argument: str, agent_class: type) -> None:
    """Refuses an optimizer that is monitored already: `monitored` wraps
    the plain optimizers itself."""
    if find_monitor(optimizer) is not None:
        raise ValueError(
            f"`{argument}` is already monitored by keras_gradmon, and "
            f"`monitored({agent_class.__name__})` wraps each optimizer itself. "
            "Pass the plain optimizer (and the monitor options to `monitored`), "
            f"or construct {agent_class.__name__} with your own wrappers. "
            f"Received: {argument}={optimizer!r}"
        )


def _scopes(agent_class: type) -> dict[str, str | None]:
    """The optimizer arguments `agent_class` takes, with their tag scopes
    (None when it takes a single one)."""
    parameters = inspect.signature(agent_class.__init__).parameters
    taken = [name for name in OPTIMIZER_ARGUMENTS if name in parameters]
    if len(taken) == 1:
        return {taken[0]: None}
    return {name: OPTIMIZER_ARGUMENTS[name] for name in taken}


def monitored(agent_class: type, **options: Any) -> type:
    """A subclass of `agent_class` whose constructor wraps every optimizer
    it is given (`optimizer`, `actor_optimizer`, `critic_optimizer`,
    `alpha_optimizer`) with `keras_gradmon.wrap(..., **options)`.

    Each wrapper records against the agent's `train_step_counter` (created
    as tf-agents would, `get_or_create_global_step()`, when not given); an
    agent with several optimizers gives each a tag scope ("actor",
    "critic", "alpha"). For agents that convert new-style tf_keras
    optimizers to classic ones (SacAgent), the inner optimizers are
    converted the same way, so training matches the unwrapped agent. The
    wrappers are also available as attributes `<argument>_monitor`.

    Args:
        agent_class: A tf-agents agent class.
        **options: `keras_gradmon.wrap` options (`MonitorConfig` options,
            `config=`).

    Example:

    ```python
    agent = monitored(dqn_agent.DqnAgent, every_n_steps=100)(
        time_step_spec, action_spec, q_network=q_net,
        optimizer=tf.compat.v1.train.AdamOptimizer(1e-3))
    ```
    """
    scopes = _scopes(agent_class)
    if not scopes:
        raise ValueError(
            "`agent_class` takes no optimizer argument (one of "
            f"{list(OPTIMIZER_ARGUMENTS)}). Received: agent_class={agent_class!r}"
        )
    if "step" in options or "name" in options:
        raise ValueError(
            "`monitored` sets `step` (the agent's train_step_counter) and the "
            f"names itself. Received: {sorted(set(options) & {'step', 'name'})}"
        )
    return type(
        f"Monitored{agent_class.__name__}",
        (agent_class,),
        {"__init__": _wrapping_init(agent_class, scopes, options)},
    )


def _wrapping_init(
    agent_class: type, scopes: dict[str, str | None], options: dict[str, Any]
) -> Any:
    """The constructor of `monitored(agent_class, **options)`."""
    convert = converts_to_legacy(agent_class)
    signature = inspect.signature(agent_class.__init__)
    var_keyword = next(
        (p.name for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD),
        None,
    )

    @functools.wraps(agent_class.__init__)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        arguments = dict(signature.bind_partial(self, *args, **kwargs).arguments)
        arguments.pop("self")
        arguments.update(arguments.pop(var_keyword, None) or {})
        counter = arguments.get("train_step_counter")
        if counter is None:
            counter = tf.compat.v1.train.get_or_create_global_step()
            arguments["train_step_counter"] = counter
        wrappers = {}
        for name, scope in scopes.items():
            optimizer = arguments.get(name)
            if optimizer is None:
                continue
            _check_plain(optimizer, name, agent_class)
            wrapper = wrap(optimizer, name=scope, step=counter, **options)
            wrappers[name] = arguments[name] = (
                convert_like_sac(wrapper) if convert else wrapper
            )
        agent_class.__init__(self, **arguments)
        for name, wrapper in wrappers.items():
            setattr(self, f"{name}_monitor", wrapper)

    return __init__
