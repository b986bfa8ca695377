"""The gradient noise scale B_simple (McCandlish, Kaplan, Amodei et al.
2018, "An Empirical Model of Large-Batch Training", appendix A.1), and
what feeds it: how a step's gradient splits into k parts (`Replicas`,
`MicroBatches`).

The initial values of a signal's state, for tests and examples.

The gradient noise scale B_simple (McCandlish, Kaplan, Amodei et al. 2018,
"An Empirical Model of Large-Batch Training", appendix A.1).

A step's gradient is estimated on two batch sizes at no extra cost: k parts
of b examples each (the k replicas under `tf.distribute`, or the k
micro-batches of Keras's `gradient_accumulation_steps=k`) give the small
gradients g_1..g_k, each the mean gradient over its part, and their mean
G_big, the gradient of the whole update's k b examples. With
|G_small|^2 = mean_i |g_i|^2 and |G_big|^2, the unbiased estimates are

    |G|^2     = (k |G_big|^2 - |G_small|^2) / (k - 1)
    tr(Sigma) = b k (|G_small|^2 - |G_big|^2) / (k - 1)

(the paper's formulas with B_small = b, B_big = k b). Each is smoothed by a
bias-corrected EMA, then B_simple = EMA(tr(Sigma)) / EMA(|G|^2), in
examples, and `batch_ratio` = B_simple / (k b), which needs no b at all.

Units: the state holds the trace per part, tr(Sigma) / b (the trace of the
covariance of one part's mean gradient); `totals` reports `trace` per
example (tr(Sigma) of a single example's gradient) when `batch_size` is
given, per part otherwise. No estimate is made with k = 1 or from non-finite
inputs: the state is left as it was, so every total reads NaN until the
first estimate. `batch_ratio` and `b_simple` also read NaN while either
smoothed estimate is not positive (the noise swamps |G|^2 at this batch).

All of it is pure `keras.ops` math with explicit state (as the clipping
rules): no TensorFlow import, no host sync, no Python branch on a tensor;
it runs eagerly, in `tf.function` (XLA too) and under `jax.jit`.

Example:

>>> rule = from_option({"decay": 0.5, "batch_size": 8})
>>> state = rule.initial_state()
>>> state = rule.update(state, part_sq_mean=3.0, big_sq=1.5, parts=4)
>>> {name: round(float(v), 4) for name, v in rule.totals(state).items()}
{'batch_ratio': 0.5, 'b_simple': 16.0, 'grad_sq': 1.0, 'trace': 16.0}

What the gradient noise scale is fed: how a step's gradient splits into
k equal parts, as the adapter sees it (`keras_gradmon.core.noise_scale`
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

>>> from keras_gradmon.core.noise_scale import from_option
>>> from keras_gradmon.core.noise_scale import initial_values
>>> noise = NoiseFeed(from_option({"decay": 0.5}))
>>> values = initial_values(noise.state_spec())
>>> from keras_gradmon.core.measurement import ClipOutcome
>>> outcome = ClipOutcome([], 2.0, 2.0, True)
>>> values = noise.feed(values, Replicas(count=2, part_sq_mean=5.0), outcome)
>>> round(float(noise.totals(values)["noise_batch_ratio"]), 4)
0.3333
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from keras import ops

from keras_gradmon import backend, validation
from keras_gradmon.backend import Tensor
from keras_gradmon.core.clipping.base import StateSpec
from keras_gradmon.validation import switch_option


def initial_values(spec: dict[str, tuple[tuple, str, float]]) -> dict[str, Any]:
    """The initial state values of a signal's `state_spec()`, as tensors
    (what its variables start from).

    Example:

    >>> tuple(initial_values({"n": ((2,), "int64", 0)})["n"].shape)
    (2,)
    """
    return {
        name: ops.full(shape, initial, dtype)
        for name, (shape, dtype, initial) in spec.items()
    }


#: What `NoiseScale.totals` returns, each written as `noise_scale/<name>`.
TOTALS: tuple[str, ...] = ("batch_ratio", "b_simple", "grad_sq", "trace")

#: The keys a `noise_scale` dict option may hold.
OPTION_KEYS: tuple[str, ...] = ("batch_size", "decay")

_NAN = float("nan")


class Estimates(NamedTuple):
    """One step's unbiased estimates (float32 scalars, NaN when k < 2).

    `grad_sq` estimates |G|^2; `part_trace` estimates tr(Sigma) / b, the
    trace of the covariance of one part's mean gradient.
    """

    grad_sq: Tensor
    part_trace: Tensor


def estimates(part_sq_mean: Any, big_sq: Any, parts: Any) -> Estimates:
    """The unbiased single-step estimates of |G|^2 and tr(Sigma) / b.

    Args:
        part_sq_mean: |G_small|^2, the mean over the k parts of |g_i|^2,
            each g_i the mean gradient over its part (what that part's own
            loss gives; under `tf.distribute`, Keras scales each replica's
            loss by 1 / k, so its squared norms need a factor k^2).
        big_sq: |G_big|^2, the squared norm of the mean of the g_i.
        parts: k, a Python int or an integer/float scalar tensor.

    Returns:
        `Estimates(grad_sq, part_trace)`, float32 scalars; both NaN when
        k < 2 (one batch size only: nothing to estimate). Either can be
        negative on a single step.

    Example:

    >>> grad_sq, part_trace = estimates(3.0, 1.5, 4)
    >>> float(grad_sq), float(part_trace)
    (1.0, 2.0)
    """
    small = ops.cast(part_sq_mean, "float32")
    big = ops.cast(big_sq, "float32")
    k = ops.cast(parts, "float32")
    several = k > 1.0
    k_minus_one = ops.where(several, k - 1.0, 1.0)
    grad_sq = (k * big - small) / k_minus_one
    part_trace = k * (small - big) / k_minus_one
    return Estimates(
        ops.where(several, grad_sq, _NAN), ops.where(several, part_trace, _NAN)
    )


def _checked(decay: object, batch_size: object, label: str) -> dict[str, Any]:
    """The validated options; errors name `label` and the key."""
    name = (lambda key: f"{label}[{key!r}]") if label else (lambda key: key)
    size = batch_size
    if size is not None:
        size = validation.positive_int(name("batch_size"), size)
    return {
        "decay": validation.open_unit_interval(name("decay"), decay),
        "batch_size": size,
    }


@dataclass(frozen=True)
class NoiseScale:
    """Smooths the noise-scale estimates and turns them into B_simple.

    State (`state_spec()`, float32 scalars, all 0 initially): `grad_sq` and
    `trace`, the EMAs of |G|^2 and tr(Sigma) / b without bias correction;
    `weight`, 1 - decay^n after n estimates (the bias correction: the EMAs
    are divided by it); `parts`, the latest estimate's k. The caller owns
    the variables: `update` returns new values, it assigns nothing.

    Args:
        decay: EMA factor in (0, 1), the weight of the past; 0.99 averages
            over about 100 updates.
        batch_size: Examples per part (b), or None: then `b_simple` is NaN
            and `trace` is per part; `batch_ratio` needs no b.

    Example:

    >>> rule = NoiseScale(decay=0.9)
    >>> state = rule.update(rule.initial_state(), 3.0, 1.5, 4)
    >>> round(float(rule.totals(state)["batch_ratio"]), 4)
    0.5
    """

    name: ClassVar[str] = "noise_scale"
    decay: float = 0.99
    batch_size: int | None = None

    def __post_init__(self) -> None:
        for key, value in _checked(self.decay, self.batch_size, "").items():
            object.__setattr__(self, key, value)

    def state_spec(self) -> StateSpec:
        """Variables the estimator needs: {name: (shape, dtype, initial)}."""
        return {
            "grad_sq": ((), "float32", 0.0),
            "trace": ((), "float32", 0.0),
            "weight": ((), "float32", 0.0),
            "parts": ((), "float32", 0.0),
        }

    def initial_state(self) -> dict[str, Tensor]:
        """The state's initial values as tensors (for tests and examples)."""
        return initial_values(self.state_spec())

    def update(
        self, values: dict[str, Any], part_sq_mean: Any, big_sq: Any, parts: Any
    ) -> dict[str, Tensor]:
        """The state after one step's estimates (see `estimates` for the
        arguments); unchanged when k < 2 or an estimate is not finite."""
        found = estimates(part_sq_mean, big_sq, parts)
        usable = ops.logical_and(
            ops.isfinite(found.grad_sq), ops.isfinite(found.part_trace)
        )
        old = {key: ops.cast(values[key], "float32") for key in self.state_spec()}
        d = self.decay
        new = {
            "grad_sq": d * old["grad_sq"] + (1.0 - d) * found.grad_sq,
            "trace": d * old["trace"] + (1.0 - d) * found.part_trace,
            "weight": d * old["weight"] + (1.0 - d),
            "parts": ops.cast(parts, "float32"),
        }
        return {key: ops.where(usable, new[key], old[key]) for key in new}

    def totals(self, values: dict[str, Any]) -> dict[str, Tensor]:
        """`{name: float32 scalar}` for each of `TOTALS` (see the module
        docstring for the units and when each is NaN)."""
        weight = ops.cast(values["weight"], "float32")
        seen = weight > 0.0
        safe_weight = ops.where(seen, weight, 1.0)
        grad_sq = self._corrected(values["grad_sq"], seen, safe_weight)
        part_trace = self._corrected(values["trace"], seen, safe_weight)
        resolved = ops.logical_and(grad_sq > 0.0, part_trace > 0.0)
        safe_grad_sq = ops.where(resolved, grad_sq, 1.0)
        in_parts = ops.where(resolved, part_trace / safe_grad_sq, _NAN)
        parts = ops.where(seen, ops.cast(values["parts"], "float32"), 1.0)
        if self.batch_size is None:  # per part: B_simple in examples unknown
            b_simple, size = ops.full((), _NAN, "float32"), 1.0
        else:
            size = float(self.batch_size)
            b_simple = in_parts * size
        return {
            "batch_ratio": in_parts / parts,
            "b_simple": b_simple,
            "grad_sq": grad_sq,
            "trace": part_trace * size,
        }

    @staticmethod
    def _corrected(ema: Any, seen: Tensor, safe_weight: Tensor) -> Tensor:
        """The bias-corrected EMA, NaN before the first estimate."""
        return ops.where(seen, ops.cast(ema, "float32") / safe_weight, _NAN)


def from_option(value: object) -> NoiseScale | None:
    """The `NoiseScale` of the `noise_scale` option's value.

    Args:
        value: False or None (off), True (the defaults) or a dict with keys
            of `OPTION_KEYS` (`decay`, `batch_size`).

    Raises:
        ValueError: naming the option (and key) and the value received.

    Example:

    >>> from_option({"batch_size": 32})
    NoiseScale(decay=0.99, batch_size=32)
    >>> from_option(False) is None
    True
    """
    given = switch_option("noise_scale", value, OPTION_KEYS)
    if given is None:
        return None
    options = {"decay": NoiseScale.decay, "batch_size": NoiseScale.batch_size}
    return NoiseScale(**_checked(label="noise_scale", **{**options, **given}))


_PREFIX = "noise_"
#: The micro-batches' squared norms since the last update.
MICRO = "noise_micro_sq"


@dataclasses.dataclass(frozen=True)
class Replicas:
    """k replicas' gradients; `part_sq_mean` = mean of their squared norms."""

    count: int
    part_sq_mean: Any


def replicas(grads: Sequence[Any], count: int, scale: Any) -> Replicas:
    """The `count` replicas' parts, from this replica's `grads` (called in
    the replica context, before they are summed; `scale`: the loss scale
    they carry, or None). A replica's part is its gradient times `count`,
    so that the parts' mean is the summed gradient.

    Example:

    >>> replicas([None], 1, None).count
    1
    """
    local = ops.zeros((), "float32")
    for grad in grads:
        if grad is not None:
            grad = ops.cast(backend.densify(grad), "float32")
            local = local + ops.sum(ops.square(grad))
    if scale is not None:
        local = local / ops.square(ops.cast(scale, "float32"))
    [total] = backend.replica_sum([local])
    return Replicas(count, total * float(count))


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
