"""`StepSignals`: the signals of a monitor that run every step (spike
tracking, spike skipping, the noise scale), built from its config, with
their state spec and their numbers for the next summary.

Example:

>>> from keras_gradmon.config import MonitorConfig
>>> signals = StepSignals(MonitorConfig(track_spikes=True))
>>> signals.needs_norm, sorted(signals.state_spec())
(True, ['spikes_max', 'spikes_max_step', 'spikes_min'])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from keras import ops

from keras_gradmon.measurement import ClipOutcome
from keras_gradmon.signals.skip_spikes import SKIPPED, SpikeSkipper
from keras_gradmon.signals.spikes import SpikeTracker

if TYPE_CHECKING:
    from keras_gradmon.config import MonitorConfig
    from keras_gradmon.signals.parts import MicroBatches, Replicas

_NAN = float("nan")

#: The totals these signals give a summary (NaN where a signal is off).
SPIKE_TOTALS = ("spike_max_norm", "spike_min_norm", "spike_max_step")
NOISE_TOTALS = ("noise_batch_ratio", "noise_b_simple", "noise_grad_sq", "noise_trace")


class StepSignals:
    """The every-step signals `config` turns on."""

    def __init__(self, config: MonitorConfig) -> None:
        self.tracker = SpikeTracker() if config.track_spikes else None
        self.skipper = SpikeSkipper.from_option(config.skip_spikes)
        self.noise = None
        if config.noise_scale:
            from keras_gradmon.signals.noise_scale import from_option
            from keras_gradmon.signals.parts import NoiseFeed

            self.noise = NoiseFeed(from_option(config.noise_scale))

    @property
    def needs_norm(self) -> bool:
        """Whether a signal reads the global norm of every step."""
        signals = (self.tracker, self.skipper, self.noise)
        return any(signal is not None for signal in signals)

    def state_spec(self) -> dict[str, tuple[tuple, str, float]]:
        """`{name: (shape, dtype, initial)}` of every signal's state."""
        spec: dict = {}
        for signal in (self.tracker, self.skipper, self.noise):
            if signal is not None:
                spec.update(signal.state_spec())
        return spec

    def observe(
        self,
        values: dict,
        outcome: ClipOutcome,
        step: Any,
        parts: Replicas | MicroBatches | None = None,
    ) -> tuple[Any, dict]:
        """`(whether to skip this step as a spike (False: never), values)`
        after this step's global norm (`outcome`) and gradient `parts` were
        taken in (pure)."""
        spike: Any = False
        norm = outcome.pre_norm
        if self.noise is not None and parts is not None:
            values = self.noise.feed(values, parts, outcome)
        if self.tracker is not None:
            values = self.tracker.observe(values, norm, step)
        if self.skipper is not None:
            spike, values = self.skipper.decide(values, norm)
        return spike, values

    def totals(self, values: dict) -> tuple[dict[str, Any], dict]:
        """`(numbers for a summary, values)`: the spikes since the previous
        summary (reset), the steps skipped as spikes so far."""
        nan = ops.convert_to_tensor(_NAN)
        totals: dict = dict.fromkeys((*SPIKE_TOTALS, *NOISE_TOTALS), nan)
        totals["spike_skipped"] = nan
        if self.tracker is not None:
            spikes, values = self.tracker.totals(values)
            totals.update(spikes)
        if self.skipper is not None:
            totals["spike_skipped"] = ops.cast(values[SKIPPED], "float32")
        if self.noise is not None:
            totals.update(self.noise.totals(values))
        return totals, values
