"""`skip_spikes`: skip the update of a step whose global gradient norm is a
spike, as OLMo-core's `SkipStepOptimizer` does: more than `z_threshold`
standard deviations above the mean of the last `window` norms, once at
least `min_history` norms were seen. Decided in the step from the state,
with no host sync.

Every finite norm enters the window, a skipped one too (as in OLMo-core):
after a lasting change of scale the window follows, rather than skipping
every step from then on. The deviation has a floor of 1e-3 of the mean, so
that a window of identical norms does not turn the next slightly larger
one into a spike.

Example:

>>> skipper = SpikeSkipper.from_option({"window": 4, "min_history": 2})
>>> from keras_gradmon.signals.values import initial_values
>>> values = initial_values(skipper.state_spec())
>>> for norm in (1.0, 1.1, 0.9, 1.0):
...     spike, values = skipper.decide(values, norm)
>>> bool(skipper.decide(values, 50.0)[0])
True
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras import ops

from keras_gradmon._validation import switch_option

#: The state's names.
NORMS, SEEN, SKIPPED = "skipspikes_norms", "skipspikes_seen", "skipspikes_skipped"

_RELATIVE_FLOOR = 1e-3


@dataclasses.dataclass(frozen=True)
class SpikeSkipper:
    """Decides, per step, whether the global norm is a spike to skip.

    Args:
        z_threshold: How many standard deviations above the window's mean
            a norm must be to be skipped (OLMo-core's `sigma_factor`).
        window: How many recent norms the mean and deviation are over.
        min_history: How many norms must have been seen before any skip.
    """

    z_threshold: float = 6.0
    window: int = 128
    min_history: int = 64

    def __post_init__(self) -> None:
        z = self.z_threshold
        if isinstance(z, bool) or not isinstance(z, (int, float)) or not z > 0:
            _fail("z_threshold", "must be a number > 0", z)
        if not _is_int(self.window) or self.window < 2:
            _fail("window", "must be an integer >= 2", self.window)
        history = self.min_history
        if not _is_int(history) or not 2 <= history <= self.window:
            _fail("min_history", f"must be an integer in [2, {self.window}]", history)

    @classmethod
    def from_option(cls, value: Any) -> SpikeSkipper | None:
        """The skipper of a `skip_spikes` option: None for False, the
        defaults for True, or a mapping of the arguments.

        Example:

        >>> SpikeSkipper.from_option({"z_threshold": 4.0}).window
        128
        """
        keys = [field.name for field in dataclasses.fields(cls)]
        options = switch_option("skip_spikes", value, keys)
        if options is None:
            return None
        return cls(**options)

    def state_spec(self) -> dict[str, tuple[tuple, str, float]]:
        """`{name: (shape, dtype, initial)}`: the window of norms, how many
        norms were seen, how many steps were skipped."""
        return {
            NORMS: ((self.window,), "float32", 0.0),
            SEEN: ((), "int64", 0),
            SKIPPED: ((), "int64", 0),
        }

    def decide(self, values: dict, norm: Any) -> tuple[Any, dict]:
        """`(whether this step is a spike to skip, new values)` (pure): the
        norm enters the window (when finite) and a skip is counted."""
        norm = ops.cast(norm, "float32")
        norms, seen = values[NORMS], values[SEEN]
        spike = self._is_spike(norms, seen, norm)
        finite = ops.isfinite(norm)
        slot = ops.reshape(ops.mod(seen, self.window), [1, 1])
        pushed = ops.scatter_update(norms, slot, ops.reshape(norm, [1]))
        skipped = values[SKIPPED] + ops.cast(spike, values[SKIPPED].dtype)
        new = {
            **values,
            NORMS: ops.where(finite, pushed, norms),
            SEEN: seen + ops.cast(finite, seen.dtype),
            SKIPPED: skipped,
        }
        return spike, new

    def _is_spike(self, norms: Any, seen: Any, norm: Any) -> Any:
        count = ops.cast(ops.minimum(seen, self.window), "int32")
        kept = ops.cast(ops.arange(self.window, dtype="int32") < count, "float32")
        n = ops.maximum(ops.cast(count, "float32"), 1.0)
        mean = ops.sum(norms * kept) / n
        deviation = ops.sqrt(ops.sum(kept * ops.square(norms - mean)) / n)
        deviation = ops.maximum(deviation, _RELATIVE_FLOOR * mean)
        ready = seen >= self.min_history
        return ops.logical_and(ready, norm - mean > self.z_threshold * deviation)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fail(name: str, requirement: str, value: object) -> None:
    raise ValueError(
        f"`skip_spikes['{name}']` {requirement}. Received: {name}={value!r}"
    )
