"""Helpers for tf-agents: wrap every optimizer an agent class takes, convert
optimizers the way SacAgent does, and trace a monitored agent's train step
twice, measuring and not (`function`). Importing it only checks that
`tf.keras` is tf_keras, as tf-agents needs (`check_legacy_keras`).

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
import os
import sys
from typing import Any

import tensorflow as tf

from keras_gradmon.legacy.stepped import StepAdapter, check_int64_step
from keras_gradmon.schedule import measuring
from keras_gradmon.watching import wrap
from keras_gradmon.wrapping import MonitoredOptimizer, find_monitor

#: The constructor arguments through which tf-agents' agents take
#: optimizers, and the tag scope each gets when an agent takes several.
OPTIMIZER_ARGUMENTS = {
    "optimizer": None,
    "actor_optimizer": "actor",
    "critic_optimizer": "critic",
    "alpha_optimizer": "alpha",
}

#: The values of `TF_USE_LEGACY_KERAS` that make `tf.keras` tf_keras.
LEGACY_KERAS_ON = ("1", "true", "True")
_LEGACY_KERAS_FIX = (
    "tf-agents (and tensorflow_probability, which it imports) need tf.keras "
    "to be tf_keras (Keras 2): set TF_USE_LEGACY_KERAS=1 before TensorFlow "
    "is imported, e.g. `TF_USE_LEGACY_KERAS=1 python train.py`, or "
    '`os.environ["TF_USE_LEGACY_KERAS"] = "1"` at the top of the script, '
    "before `import tensorflow`, and install tf-keras "
    "(pip install 'keras-gradmon[agents]'). Without it, importing tf_agents "
    'fails inside tensorflow_probability with "AttributeError: module '
    "'keras._tf_keras.keras' has no attribute '__internal__'\"."
)


def check_legacy_keras() -> None:
    """Raises a clear `ImportError` unless `tf.keras` is tf_keras, as
    tf-agents needs; run on import.

    Raises:
        ImportError: `TF_USE_LEGACY_KERAS` is not set, was set after
            `tf.keras` was first used, or tf_keras is not installed; the
            message names the fix and the value received.
    """
    value = os.environ.get("TF_USE_LEGACY_KERAS")
    try:
        legacy = hasattr(tf.keras, "__internal__")
    except ImportError as error:  # the variable set, tf_keras missing
        raise ImportError(
            f"{_LEGACY_KERAS_FIX} ({error}) Received: TF_USE_LEGACY_KERAS={value!r}"
        ) from error
    if legacy:
        return
    late = (
        " (set after tf.keras was first used: too late)"
        if value in LEGACY_KERAS_ON
        else ""
    )
    raise ImportError(
        f"{_LEGACY_KERAS_FIX} Received: TF_USE_LEGACY_KERAS={value!r}{late}, "
        f"tf.keras is {tf.keras.__name__}"
    )


check_legacy_keras()


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
        check_int64_step(counter, "train_step_counter")
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


def function(train: Any, optimizers: Any = None, **kwargs: Any) -> Any:
    """`common.function(train)` for a monitored agent: traced twice, once
    measuring and once without the monitor; each call picks, on the host,
    the one that measures only when a wrapper is due.

    Without it, a step that records nothing still runs the monitor's
    conditional (about 0.1 ms a step without XLA). With it, such a step
    runs the unwrapped step, op for op; the step variables are read on the
    host only near a due step (and every 64 calls), as a read waits for the
    previous step to finish. A wrapper that clips or skips non-finite steps
    keeps its every-step work in both functions.

    Args:
        train: The agent's `train` (a bound method: the wrappers are found
            among the agent's attributes), or any function whose train steps
            apply the gradients of `optimizers`.
        optimizers: The monitored optimizers (default: those of `train`'s
            agent).
        **kwargs: Passed on to `common.function` (`autograph=False` unless
            given, as there).

    Example:

    ```python
    agent.train = gradmon_agents.function(agent.train)  # not common.function
    with writer.as_default():
        agent.train(experience)  # measures on due steps only
    ```
    """
    from tf_agents.utils import common

    wrappers = _wrappers_of(train, optimizers)

    def traced(on: bool) -> Any:
        @functools.wraps(train)
        def run(*args: Any, **kw: Any) -> Any:
            with measuring(on):  # runs while tracing only
                return train(*args, **kw)

        return common.function(run, **kwargs)

    return _HostChoice(traced(True), traced(False), wrappers)


def _wrappers_of(train: Any, optimizers: Any) -> list[StepAdapter]:
    """The monitored optimizers `function` chooses for, checked."""
    if optimizers is None:
        agent = getattr(train, "__self__", None)
        optimizers = [] if agent is None else list(vars(agent).values())
        optimizers = [o for o in optimizers if isinstance(o, StepAdapter)]
        if not optimizers:
            raise ValueError(
                "`train` must be the train method of an agent with an optimizer "
                "monitored by keras_gradmon (from `monitored(...)` or "
                "`keras_gradmon.wrap`), or pass `optimizers=`. Received: "
                f"train={train!r}"
            )
    wrappers = list({id(o): o for o in optimizers}.values())
    for wrapper in wrappers:
        if not isinstance(wrapper, StepAdapter):
            raise ValueError(
                "`optimizers` must be tf_keras or tf.compat.v1.train optimizers "
                "monitored by keras_gradmon. Received: optimizers="
                f"{optimizers!r}"
            )
    return wrappers


#: The most calls `_HostChoice` makes without reading the steps.
_READ_EVERY = 64


class _HostChoice:
    """Calls `measured` when any wrapper is due at its step (or within the
    steps one call has advanced it by, at most), else `unmeasured`.

    A read of the steps waits for the previous step to finish (about 80 us
    of a 1.5 ms DQN step, the overlap of the host with the step lost), so
    they are read only where a due step is within reach: between reads, a
    call moves a step by at most `_advance` (the most seen), and while the
    steps reachable since the last read hold no due step, no read is
    needed. Near a due step, at the first call and every 64 calls (a step
    variable set from outside, such as a restore, is seen within 64 calls)
    it reads."""

    def __init__(self, measured: Any, unmeasured: Any, wrappers: list) -> None:
        self.measured, self.unmeasured = measured, unmeasured
        self._wrappers = wrappers
        self._advance = 1  # the most steps one call has moved a step by
        self._last: list[int] | None = None  # the steps at the last read
        self._calls = 0  # calls since the last read
        #: How many calls read the steps.
        self.reads = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        due = self._due_now()
        self._calls += 1
        return (self.measured if due else self.unmeasured)(*args, **kwargs)

    def _due_now(self) -> bool:
        """Whether the next call may hold a due step: from the last read
        while none is within reach, else from a read now."""
        if self._last is not None and self._calls < _READ_EVERY:
            reach = (self._calls + 1) * self._advance
            pairs = zip(self._wrappers, self._last)
            if not any(_due(w, s, s + reach) for w, s in pairs):
                return False
        steps = [_host_value(w.step_variable()) for w in self._wrappers]
        self.reads += 1
        if self._last is not None and self._calls:
            moved = max(s - last for s, last in zip(steps, self._last))
            self._advance = max(self._advance, -(-moved // self._calls))
        self._last, self._calls = steps, 0
        return any(_due(w, s, s + self._advance) for w, s in zip(self._wrappers, steps))


def _due(wrapper: StepAdapter, first: int, end: int) -> bool:
    monitor = wrapper.monitor
    return monitor.schedule.any_due(first, end) or (
        monitor.histogram_schedule.any_due(first, end)
    )


def _host_value(variable: Any) -> int:
    """The value of a step variable on the host (0 before it exists): the
    raw read, about 5 us (`.numpy()` takes about 17)."""
    if variable is None:
        return 0
    try:
        from tensorflow.python.ops import gen_resource_variable_ops

        value = gen_resource_variable_ops.read_variable_op(
            variable.handle, variable.dtype
        )
    except (AttributeError, ImportError):  # not a plain resource variable
        value = tf.convert_to_tensor(variable)
    return int(value)
