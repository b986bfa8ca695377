"""The signals computed in the step beside the statistics, each owning its
state (`state_spec()`) and updating it with pure functions of the state
values: spikes between summaries, `skip_spikes`, the update/weight ratio,
and `StepSignals`, the every-step ones a config turns on.

Signals computed in the step beside the statistics: each is one module
that owns its state (`state_spec()`), updates it with pure functions of the
state values, and hands its numbers to the next summary.

- `spikes`: the largest and smallest global norm between two summaries.
- `skip_spikes`: skips a step whose norm is a spike (a z-score over a window).
- `update_ratio`: ||w_after - w_before|| / ||w_before||, per variable,
  group and globally.
- `noise_scale`: the gradient noise scale B_simple (McCandlish et al. 2018).

Spikes between summaries: the largest and smallest global gradient norm
of the steps since the previous summary (that one included), and the step
of the largest, kept in the state every step and written with the next
summary. With `every_n_steps=100` a spike at step 37 shows at step 100.

Example:

>>> tracker = SpikeTracker()
>>> from keras_gradmon.core.noise_scale import initial_values
>>> values = initial_values(tracker.state_spec())
>>> values = tracker.observe(values, 3.0, 7)
>>> values = tracker.observe(values, 9.0, 8)
>>> totals, values = tracker.totals(values)
>>> [float(totals[k]) for k in ("spike_max_norm", "spike_min_norm",
...  "spike_max_step")]
[9.0, 3.0, 8.0]

`skip_spikes`: skip the update of a step whose global gradient norm is a
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
>>> from keras_gradmon.core.noise_scale import initial_values
>>> values = initial_values(skipper.state_spec())
>>> for norm in (1.0, 1.1, 0.9, 1.0):
...     spike, values = skipper.decide(values, norm)
>>> bool(skipper.decide(values, 50.0)[0])
True

`StepSignals`: the signals of a monitor that run every step (spike
tracking, spike skipping, the noise scale), built from its config, with
their state spec and their numbers for the next summary.

Example:

>>> signals = StepSignals(track_spikes=True)
>>> signals.needs_norm, sorted(signals.state_spec())
(True, ['spikes_max', 'spikes_max_step', 'spikes_min'])

The update/weight ratio (the effective learning rate):
||w_after - w_before|| / ||w_before||, per variable, per group and over
all variables, from the update the inner optimizer really applied
(weight decay, momentum and its own clipping included).

Karpathy's rule of thumb puts a healthy ratio around 1e-3 per step: far
below, the layer barely learns; far above, it is unstable.

Example:

>>> import numpy as np
>>> old = {0: np.array([3.0, 4.0], "f4"), 1: np.array([1.0], "f4")}
>>> new = {0: np.array([3.0, 4.05], "f4"), 1: np.array([1.0], "f4")}
>>> [round(float(x), 4) for x in update_ratios(old, new, 2, [[0]])]
[0.01, 0.0, 0.01, 0.0098]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from keras import ops

from keras_gradmon import backend
from keras_gradmon.columns import STATISTICS
from keras_gradmon.core.batched import (
    batched_difference_statistics,
    batched_statistics,
    combine_norms,
    layout_groups,
)
from keras_gradmon.core.measurement import ClipOutcome
from keras_gradmon.validation import fail, switch_option

if TYPE_CHECKING:
    from keras_gradmon.core.noise_scale import MicroBatches, Replicas


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


#: The state's names.
NORMS, SEEN, SKIPPED = "skipspikes_norms", "skipspikes_seen", "skipspikes_skipped"

_RELATIVE_FLOOR = 1e-3


def _spike_error(name: str, requirement: str, value: object) -> ValueError:
    return fail(name, requirement, value, shown=f"skip_spikes['{name}']")


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
            raise _spike_error("z_threshold", "must be a number > 0", z)
        if not _is_int(self.window) or self.window < 2:
            raise _spike_error("window", "must be an integer >= 2", self.window)
        history = self.min_history
        if not _is_int(history) or not 2 <= history <= self.window:
            requirement = f"must be an integer in [2, {self.window}]"
            raise _spike_error("min_history", requirement, history)

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
        slot = ops.cast(ops.mod(seen, self.window), "int32")
        pushed = ops.where(ops.equal(ops.arange(self.window), slot), norm, norms)
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


_NAN = float("nan")


class StepSignals:
    """The every-step signals a monitor's options turn on (its
    `MonitorConfig`'s `track_spikes`, `skip_spikes` and `noise_scale`, as
    validated there)."""

    def __init__(
        self,
        track_spikes: bool = False,
        skip_spikes: Any = False,
        noise_scale: Any = False,
    ) -> None:
        self.tracker = SpikeTracker() if track_spikes else None
        self.skipper = SpikeSkipper.from_option(skip_spikes)
        self.noise = None
        if noise_scale:
            from keras_gradmon.core.noise_scale import NoiseFeed, from_option

            self.noise = NoiseFeed(from_option(noise_scale))

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
        totals: dict = {}
        if self.tracker is not None:
            spikes, values = self.tracker.totals(values)
            totals.update(spikes)
        if self.skipper is not None:
            totals["spike_skipped"] = ops.cast(values[SKIPPED], "float32")
        if self.noise is not None:
            totals.update(self.noise.totals(values))
        return totals, values


_NAN = float("nan")


def update_ratios(
    old: Mapping[int, Any],
    new: Mapping[int, Any],
    rows: int,
    members: Sequence[Sequence[int]],
    sizes: Any = None,
) -> Any:
    """`[rows + len(members) + 1]` float32: each variable's ratio (by row;
    NaN for a row not in `old`, or whose weights had a norm of 0 or a
    non-finite element, or whose update had one), each group's (over its
    rows in `old`), then the global one.

    The norms are each a reduction of its own for the large tensors (or
    all, if few), the others' one batched program (`_norms`).

    Args:
        old: The weights before the update, by row.
        new: The weights after it, by row (the same rows).
        rows: The number of variables.
        members: The rows of each group.
        sizes: `[rows]` float32, the norms of `old` by row (NaN where not
            finite), where the step measured them already (the weight
            statistics); None: computed here.
    """
    order = sorted(old)
    before = [_wide(old[i]) for i in order]
    moved = _norms([_wide(new[i]) for i in order], before)
    size = _norms(before) if sizes is None else ops.take(sizes, order, 0)
    position = {i: k for k, i in enumerate(order)}
    ratios = ops.concatenate([_ratio(moved, size), ops.full([1], _NAN)], 0)
    placed = ops.take(ratios, [position.get(i, len(order)) for i in range(rows)], 0)
    combined = [
        _combined_ratio(moved, size, [position[i] for i in group if i in position])
        for group in members
    ]
    combined.append(_combined_ratio(moved, size, list(range(len(order)))))
    combined = ops.stack([ops.cast(x, "float32") for x in combined])
    return ops.concatenate([ops.cast(placed, "float32"), combined], 0)


#: The statistics `_norms` reads, and their columns.
_NORMS = ("norm", "nonfinite")
_NORM, _NONFINITE = (STATISTICS.index(name) for name in _NORMS)
#: Up to this many tensors besides the large ones, each is reduced alone.
_FEW = 32


def _norms(tensors: list, minus: list | None = None) -> Any:
    """The L2 norm of each of `tensors` (of `tensors[i] - minus[i]`, with
    `minus`) in float32, NaN where an element is not finite. A reduction of
    its own for each large tensor (`layout_groups`: at most 32), and for the
    others if at most 32: fastest to run; the others, if more, by one
    batched program (`batched_statistics`, its size not growing with their
    number; the differences taken packed, `batched_difference_statistics`):
    a model of hundreds of variables would otherwise compile hundreds of
    kernels (about 10 s of MobileNetV3Small's XLA compile)."""
    large, _ = layout_groups([backend.num_elements(t) for t in tensors])
    rest = [i for i in range(len(tensors)) if i not in large]
    alone, packed = (large + rest, []) if len(rest) <= _FEW else (large, rest)
    parts = []
    if alone:
        terms = [tensors[i] if minus is None else tensors[i] - minus[i] for i in alone]
        parts.append(ops.stack([ops.cast(_plain_norm(t), "float32") for t in terms]))
    if packed:
        chosen = [tensors[i] for i in packed]
        if minus is None:
            rows = batched_statistics(chosen, _NORMS)
        else:
            subtracted = [minus[i] for i in packed]
            rows = batched_difference_statistics(chosen, subtracted, _NORMS)
        parts.append(ops.where(rows[:, _NONFINITE] == 0, rows[:, _NORM], _NAN))
    order = np.argsort(alone + packed).astype("int32")
    return ops.take(ops.concatenate(parts, 0), order, 0)


def _plain_norm(value: Any) -> Any:
    """The plain float32 norm (weights and updates do not come near
    float32's limit), NaN if not finite (as for the batched ones)."""
    norm = ops.sqrt(ops.sum(ops.square(value)))
    return ops.where(ops.isfinite(norm), norm, _NAN)


def _wide(value: Any) -> Any:
    """`value` in float32 at least, so that the difference is exact enough."""
    value = ops.convert_to_tensor(value)
    wide = value.dtype == "float32" or value.dtype == "float64"
    return value if wide else ops.cast(value, "float32")


def _ratio(moved: Any, size: Any) -> Any:
    return ops.where(size > 0, moved / ops.where(size > 0, size, 1.0), _NAN)


def _combined_ratio(moved: Any, size: Any, positions: list[int]) -> Any:
    if not positions:
        return ops.convert_to_tensor(_NAN)
    pick = lambda x: combine_norms(ops.take(x, positions, axis=0))  # noqa: E731
    return _ratio(pick(moved), pick(size))
