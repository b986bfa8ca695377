"""RL training health for tf-agents agents (under `TF_USE_LEGACY_KERAS=1`).

Is the agent getting better, is it exploring, does its value estimate match
what it earns, is every sample used enough? `RLHealthMonitor` answers at
summary steps, in TensorBoard (`rl/...` tags), with alerts, and
`keras-gradmon report` reads it back (`--group` across seeds). See
docs/rl_health.md.

Names are imported on first use: the pure-Python parts (`rules`, `tags`)
load without TensorFlow, which the report relies on.

Example:

```python
from keras_gradmon.rl import RLHealthMonitor

monitor = RLHealthMonitor(agent, env_batch_size=env.batch_size,
                          every_n_steps=500, writer=writer)
driver = DynamicStepDriver(env, agent.collect_policy,
                           observers=[buffer.add_batch, monitor.observer])
...
monitor.train(experience)        # instead of agent.train(experience)
```
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the lazily imported names, for type checkers
    from keras_gradmon.rl.monitor import RLHealthMonitor  # noqa: F401
    from keras_gradmon.rl.observer import EpisodeObserver  # noqa: F401
    from keras_gradmon.rl.probes import value_function  # noqa: F401
    from keras_gradmon.rl.rules import (  # noqa: F401
        EntropyCollapseRule,
        LowIntensityRule,
        OverestimationRule,
        ReturnCollapseRule,
        ThroughputDropRule,
        default_rl_rules,
    )

_EXPORTS = {
    "EntropyCollapseRule": "keras_gradmon.rl.rules",
    "EpisodeObserver": "keras_gradmon.rl.observer",
    "LowIntensityRule": "keras_gradmon.rl.rules",
    "OverestimationRule": "keras_gradmon.rl.rules",
    "RLHealthMonitor": "keras_gradmon.rl.monitor",
    "ReturnCollapseRule": "keras_gradmon.rl.rules",
    "ThroughputDropRule": "keras_gradmon.rl.rules",
    "default_rl_rules": "keras_gradmon.rl.rules",
    "value_function": "keras_gradmon.rl.probes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'keras_gradmon.rl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
