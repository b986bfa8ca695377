"""keras_gradmon: gradient, weight and activation monitoring for Keras and
tf-agents, computed inside the compiled (XLA) train step.

`import keras_gradmon` registers the optimizer wrappers with Keras and
tf_keras (for `load_model`) as soon as those are imported, and imports the
public names below on first use, so that the `keras-gradmon` command does
not import TensorFlow until it is needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from keras_gradmon import _registration

if TYPE_CHECKING:  # the lazily imported names, for type checkers
    from keras_gradmon.activations.monitor import (  # noqa: F401
        ActivationMonitor,
        ActivationOptions,
    )
    from keras_gradmon.activations.probe import ActivationSnapshot  # noqa: F401
    from keras_gradmon.alerts.delivery import (  # noqa: F401
        AlertChecker,
        AlertOptions,
        GradientAlertError,
    )
    from keras_gradmon.callbacks import (  # noqa: F401
        ActivationMonitorCallback,
        GradientAlertCallback,
        GradientMonitorCallback,
        GradientSummaryCallback,
    )
    from keras_gradmon.columns import (  # noqa: F401
        STATISTICS,
        HistogramSnapshot,
        Snapshot,
    )
    from keras_gradmon.core.config import MonitorConfig  # noqa: F401
    from keras_gradmon.keras3 import GradientMonitorOptimizer  # noqa: F401
    from keras_gradmon.rl.monitor import RLHealthMonitor, RLOptions  # noqa: F401
    from keras_gradmon.rl.observer import EpisodeObserver  # noqa: F401
    from keras_gradmon.schedule import Schedule  # noqa: F401
    from keras_gradmon.watching import Watch, watch, wrap, write_summaries  # noqa: F401
    from keras_gradmon.wrapping import MonitoredOptimizer  # noqa: F401

__version__ = "0.3.0"

#: The public names, imported on first use: the common job (`watch`), the
#: wrapper, the callbacks and monitors, their options, the custom loop's
#: calls, and what `snapshot()` returns.
_EXPORTS = {
    "ActivationMonitor": "keras_gradmon.activations.monitor",
    "ActivationMonitorCallback": "keras_gradmon.callbacks",
    "ActivationOptions": "keras_gradmon.activations.monitor",
    "ActivationSnapshot": "keras_gradmon.activations.probe",
    "AlertChecker": "keras_gradmon.alerts.delivery",
    "AlertOptions": "keras_gradmon.alerts.delivery",
    "EpisodeObserver": "keras_gradmon.rl.observer",
    "GradientAlertError": "keras_gradmon.alerts.delivery",
    "GradientMonitorCallback": "keras_gradmon.callbacks",
    "GradientMonitorOptimizer": "keras_gradmon.keras3",
    "HistogramSnapshot": "keras_gradmon.columns",
    "MonitorConfig": "keras_gradmon.core.config",
    "MonitoredOptimizer": "keras_gradmon.wrapping",
    "RLHealthMonitor": "keras_gradmon.rl.monitor",
    "RLOptions": "keras_gradmon.rl.monitor",
    "STATISTICS": "keras_gradmon.columns",
    "Schedule": "keras_gradmon.schedule",
    "Snapshot": "keras_gradmon.columns",
    "Watch": "keras_gradmon.watching",
    "watch": "keras_gradmon.watching",
    "wrap": "keras_gradmon.watching",
    "write_summaries": "keras_gradmon.watching",
    # Deprecated, for one release: GradientMonitorCallback replaces both.
    "GradientAlertCallback": "keras_gradmon.callbacks",
    "GradientSummaryCallback": "keras_gradmon.callbacks",
}

__all__ = sorted(_EXPORTS)

_registration.install()


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'keras_gradmon' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
