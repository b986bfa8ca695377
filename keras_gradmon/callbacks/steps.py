"""Which optimizer steps `fit`'s batches covered, counted on the host."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from keras_gradmon.adapters.base import MonitoredOptimizer, find_monitored


def optimizer_step(optimizer: Any) -> int:
    """The optimizer's iteration count, as a Python int (one host read; from
    the trainer's live state on JAX, where `fit` keeps it)."""
    read = getattr(optimizer, "read_iterations", None)
    if read is not None:
        return read()
    return int(optimizer.iterations.numpy())


def live_optimizer_step(optimizer: Any, model: Any) -> int:
    """`optimizer_step` of `model`'s optimizer, read where the count lives:
    during a JAX `fit` (its variable purged until the epoch ends) in the
    trainer's `model._jax_state["optimizer_variables"]`, at the place of
    `optimizer.iterations` in `optimizer.variables`; elsewhere as
    `optimizer_step` reads it.

    Example:

    >>> live_optimizer_step(model.optimizer, model)  # doctest: +SKIP
    120
    """
    count = _trainer_count(optimizer, model)
    return optimizer_step(optimizer) if count is None else count


def _trainer_count(optimizer: Any, model: Any) -> int | None:
    """The iteration count in the JAX trainer's live state, None when the
    trainer holds none ahead of the variables."""
    from keras_gradmon.backend import trainer_values

    values = trainer_values(model, "optimizer_variables")
    places = [id(v) for v in getattr(optimizer, "variables", ())]
    iterations = id(optimizer.iterations)
    if not values or iterations not in places:
        return None
    return int(np.asarray(values[places.index(iterations)]))


def monitored_optimizer(
    callback: str, optimizer: Any, model: Any
) -> MonitoredOptimizer:
    """The monitored optimizer a callback reads: `optimizer`, else the
    model's, with an error that says what to do when the model's optimizer
    is not monitored (a custom `train_step` that applies a wrapper kept
    outside `compile`: Keras then made an optimizer of its own).

    Example:

    >>> monitored_optimizer("GradientSummaryCallback", None, model)  # doctest: +SKIP
    """
    if optimizer is not None:
        return _bound(find_monitored(optimizer), model)
    found = getattr(model, "optimizer", None)
    try:
        return _bound(find_monitored(found), model)
    except ValueError as error:
        raise ValueError(
            f"{callback} reads the model's optimizer, {found!r}, which "
            "keras_gradmon does not monitor. If your `train_step` applies a "
            "monitored optimizer that was not passed to `compile` (Keras "
            "then makes an optimizer of its own), pass it to the callback: "
            f"{callback}(..., optimizer=my_monitored_optimizer). ({error})"
        ) from None


def _bound(monitored: MonitoredOptimizer, model: Any) -> MonitoredOptimizer:
    """`monitored`, told to read its live state from `model`'s trainer (JAX
    keeps it outside the variables during `fit`)."""
    bind = getattr(monitored, "bind_model", None)
    if bind is not None and model is not None:
        bind(model)
    return monitored


class StepTracker:
    """Maps `fit`'s batch indices to optimizer steps, without device reads.

    At each epoch start it takes the optimizer's iteration count (one host
    read an epoch); at the end of the epoch's first batch, with `read`
    given, it reads the count once more to learn how many optimizer steps
    a batch takes (a `train_step` may apply the optimizer several times:
    a WGAN's critic steps); batches are then counted from it, several
    steps per batch with `steps_per_execution`. A step skipped for
    non-finite gradients does not advance the optimizer's count, so within
    an epoch the host count can run ahead by the skips (callers that must
    not miss a summary look again until they find it).

    Args:
        read: Reads the optimizer's iteration count, or None to take one
            step per batch.

    Example:

    >>> tracker = StepTracker()
    >>> tracker.start_epoch(iterations=100)
    >>> tracker.batch_start(0), tracker.batch_end(0), tracker.batch_end(3)
    (100, (100, 101), (101, 104))
    >>> tracker = StepTracker(read=lambda: 103)   # 3 steps in the first batch
    >>> tracker.start_epoch(iterations=100)
    >>> tracker.batch_end(0), tracker.batch_end(1)
    ((100, 103), (103, 106))
    """

    def __init__(self, read: Callable[[], int] | None = None) -> None:
        self.read = read
        self.epoch_first = 0
        self.done = 0
        #: Optimizer steps per batch (1 until measured).
        self.per_batch = 1.0

    def start_epoch(self, iterations: int) -> None:
        self.epoch_first = int(iterations)
        self.done = 0

    def batch_start(self, batch: int) -> int:
        """The step the batch with index `batch` starts at."""
        return self.epoch_first + self._steps(batch)

    def batch_end(self, batch: int) -> tuple[int, int]:
        """`[first, end)`: the steps run since the previous `batch_end`."""
        if self.done == 0 and self.read is not None:
            taken = int(self.read()) - self.epoch_first
            if taken > 0:
                self.per_batch = taken / (batch + 1)
        first = self.epoch_first + self._steps(self.done)
        self.done = max(self.done, batch + 1)
        return first, self.epoch_first + self._steps(self.done)

    def _steps(self, batches: int) -> int:
        return round(self.per_batch * batches)
