"""Which optimizer steps `fit`'s batches covered, counted on the host."""

from __future__ import annotations

from typing import Any


def optimizer_step(optimizer: Any) -> int:
    """The optimizer's iteration count, as a Python int (one host read)."""
    return int(optimizer.iterations.numpy())


class StepTracker:
    """Maps `fit`'s batch indices to optimizer steps, without device reads.

    At each epoch start it takes the optimizer's iteration count (one host
    read an epoch); batches are then counted from it, several steps per
    batch with `steps_per_execution`. A step skipped for non-finite
    gradients does not advance the optimizer's count, so within an epoch
    the host count can run ahead by the skips (callers that must not miss
    a summary look again until they find it).

    Example:

    >>> tracker = StepTracker()
    >>> tracker.start_epoch(iterations=100)
    >>> tracker.batch_start(0), tracker.batch_end(0), tracker.batch_end(3)
    (100, (100, 101), (101, 104))
    """

    def __init__(self) -> None:
        self.epoch_first = 0
        self.done = 0

    def start_epoch(self, iterations: int) -> None:
        self.epoch_first = int(iterations)
        self.done = 0

    def batch_start(self, batch: int) -> int:
        """The step the batch with index `batch` starts at."""
        return self.epoch_first + batch

    def batch_end(self, batch: int) -> tuple[int, int]:
        """`[first, end)`: the steps run since the previous `batch_end`."""
        first = self.epoch_first + self.done
        self.done = max(self.done, batch + 1)
        return first, self.epoch_first + self.done
