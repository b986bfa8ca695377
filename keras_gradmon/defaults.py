"""Option defaults shared by the monitors, their callbacks, the alert rules,
the report and the command line: each written here once.

No TensorFlow, no Keras: the report and the command line import it.

Example:

>>> from keras_gradmon import defaults
>>> defaults.STD_BAND, defaults.DEAD_FRACTION
((0.05, 20.0), 0.25)
"""

from __future__ import annotations

#: The healthy `(low, high)` band of a layer's activation std: the report's
#: layer findings (the activation alerts judge each layer against its own
#: recent level; a fixed band is opt-in there, `std_band`). Wide on
#: purpose: healthy models
#: measured 0.16 to 1.35 (a Glorot-initialized ReLU MLP, a BatchNorm CNN;
#: docs/activations.md), below the 0.5 of the usual 0.5-2.0 rule of thumb,
#: which fired on both. The band catches a collapse or a blow-up of the
#: scale (10x and more), not a model's own scale.
STD_BAND: tuple[float, float] = (0.05, 20.0)

#: More than this fraction of a layer's units dead is unhealthy: the
#: report's layer findings (opt-in for the alerts, `dead_fraction`).
DEAD_FRACTION: float = 0.25

#: Activation probes: every this many steps, with this many histogram buckets.
ACTIVATION_EVERY_N_STEPS: int = 100
ACTIVATION_HISTOGRAM_BUCKETS: int = 30

#: `RLHealthMonitor`: summaries every this many train steps, over the last
#: this many episodes.
RL_EVERY_N_STEPS: int = 1000
RL_WINDOW: int = 100
