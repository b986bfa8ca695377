"""What the gradient noise scale is fed: how a step's gradient splits into
k equal parts, as the adapter sees it (`keras_gradmon.signals.noise_scale`
estimates from it).

- `Replicas`: under `tf.distribute`, the k replicas' own gradients, seen
  before they are summed: their mean squared norm comes with the step, the
  summed gradient's norm is the step's global norm.
- `MicroBatches`: under the inner optimizer's `gradient_accumulation_steps=k`,
  each step is one micro-batch: its squared norm is added up in the state,
  and the step that applies the update (the k-th) reads the mean of the k
  micro-batch gradients from the inner optimizer's accumulators.

The part gradients are scaled so that their mean is the gradient the monitor
measures (a replica's gradient times k, as Keras divides each replica's loss
by k), whatever convention the loss follows.

Example:

>>> from keras_gradmon.signals.noise_scale import from_option
>>> from keras_gradmon.signals.values import initial_values
>>> noise = NoiseFeed(from_option({"decay": 0.5}))
>>> values = initial_values(noise.state_spec())
>>> from keras_gradmon.measurement import ClipOutcome
>>> outcome = ClipOutcome([], 2.0, 2.0, True)
>>> values = noise.feed(values, Replicas(count=2, part_sq_mean=5.0), outcome)
>>> round(float(noise.totals(values)["noise_batch_ratio"]), 4)
0.3333
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from keras import ops

from keras_gradmon import backend
from keras_gradmon.signals.noise_scale import NoiseScale

_PREFIX = "noise_"
#: The micro-batches' squared norms since the last update.
MICRO = "noise_micro_sq"


@dataclasses.dataclass(frozen=True)
class Replicas:
    """k replicas' gradients; `part_sq_mean` = mean of their squared norms."""

    count: int
    part_sq_mean: Any


@dataclasses.dataclass(frozen=True)
class MicroBatches:
    """k micro-batches: `completes` (bool tensor) says this step applies the
    update; `mean_sq(grads)` (called only then, with this step's gradients
    as handed on) is the squared norm of the mean of the k micro-batch
    gradients."""

    count: int
    completes: Any
    mean_sq: Callable[[list], Any]


class NoiseFeed:
    """The noise scale's state in the monitor (its names prefixed), fed
    every step with the step's parts and global norm."""

    def __init__(self, noise: NoiseScale) -> None:
        self.noise = noise

    def state_spec(self) -> dict[str, tuple[tuple, str, float]]:
        spec = {_PREFIX + k: v for k, v in self.noise.state_spec().items()}
        return {**spec, MICRO: ((), "float32", 0.0)}

    def feed(self, values: dict, parts: Replicas | MicroBatches, outcome: Any) -> dict:
        """`values` after this step's parts were taken in (pure). `outcome`
        (a `ClipOutcome`) has the step's global norm: of the summed
        gradient (replicas); of this micro-batch's gradient as the inner
        optimizer accumulates it, clipped (micro-batches)."""
        if isinstance(parts, Replicas):
            square = ops.square(ops.cast(outcome.pre_norm, "float32"))
            return self._update(values, parts.part_sq_mean, square, parts.count)
        square = ops.square(ops.cast(outcome.post_norm, "float32"))
        summed = values[MICRO] + square
        keys = [*self.state_spec()]

        def finish() -> dict:
            mean = summed / float(parts.count)
            big = parts.mean_sq(outcome.grads)
            new = self._update(values, mean, big, parts.count)
            return {**{k: new[k] for k in keys}, MICRO: ops.zeros_like(summed)}

        def keep() -> dict:
            return {**{k: values[k] for k in keys}, MICRO: summed}

        return {**values, **backend.cond(parts.completes, finish, keep)}

    def totals(self, values: dict) -> dict[str, Any]:
        """`{noise_<total>: value}` for a summary."""
        totals = self.noise.totals(self._own(values))
        return {_PREFIX + name: value for name, value in totals.items()}

    def _own(self, values: dict) -> dict:
        """The estimator's state, under its own names."""
        return {name: values[_PREFIX + name] for name in self.noise.state_spec()}

    def _update(self, values: dict, part_sq_mean: Any, big_sq: Any, k: int) -> dict:
        new = self.noise.update(self._own(values), part_sq_mean, big_sq, k)
        return {**values, **{_PREFIX + name: v for name, v in new.items()}}
