"""Spikes between summaries: the largest and smallest global gradient norm
of the steps since the previous summary (that one included), and the step
of the largest, kept in the state every step and written with the next
summary. With `every_n_steps=100` a spike at step 37 shows at step 100.

Example:

>>> tracker = SpikeTracker()
>>> from keras_gradmon.signals.values import initial_values
>>> values = initial_values(tracker.state_spec())
>>> values = tracker.observe(values, 3.0, 7)
>>> values = tracker.observe(values, 9.0, 8)
>>> totals, values = tracker.totals(values)
>>> [float(totals[k]) for k in ("spike_max_norm", "spike_min_norm",
...  "spike_max_step")]
[9.0, 3.0, 8.0]
"""

from __future__ import annotations

import math
from typing import Any

from keras import ops

from keras_gradmon import backend

_NAN = float("nan")

#: The state's names.
MAX, MIN, STEP = "spikes_max", "spikes_min", "spikes_max_step"


class SpikeTracker:
    """Keeps the max and min of the global norm since the last summary.

    A NaN norm is left out (the non-finite counts report it); an Inf norm
    (overflow) is a max like any other.
    """

    def state_spec(self) -> dict[str, tuple[tuple, str, float]]:
        """`{name: (shape, dtype, initial)}` of the state it keeps: no norm
        seen is a max of -1 and a min of +Inf."""
        return {
            MAX: ((), "float32", -1.0),
            MIN: ((), "float32", math.inf),
            STEP: ((), backend.step_dtype(), -1),
        }

    def observe(self, values: dict, norm: Any, step: Any) -> dict:
        """`values` with this step's global `norm` taken in (pure)."""
        norm = ops.cast(norm, "float32")
        seen = ops.logical_not(ops.isnan(norm))
        higher = ops.logical_and(seen, norm > values[MAX])
        lower = ops.logical_and(seen, norm < values[MIN])
        step = ops.cast(step, values[STEP].dtype)
        return {
            **values,
            MAX: ops.where(higher, norm, values[MAX]),
            MIN: ops.where(lower, norm, values[MIN]),
            STEP: ops.where(higher, step, values[STEP]),
        }

    def totals(self, values: dict) -> tuple[dict[str, Any], dict]:
        """`(numbers for the summary, values reset)`: NaN where no norm was
        seen since the previous summary."""
        seen = values[MAX] >= 0.0
        totals = {
            "spike_max_norm": ops.where(seen, values[MAX], _NAN),
            "spike_min_norm": ops.where(seen, values[MIN], _NAN),
            "spike_max_step": ops.where(seen, ops.cast(values[STEP], "float32"), _NAN),
        }
        reset = {
            **values,
            MAX: ops.full_like(values[MAX], -1.0),
            MIN: ops.full_like(values[MIN], math.inf),
            STEP: ops.full_like(values[STEP], -1),
        }
        return totals, reset
