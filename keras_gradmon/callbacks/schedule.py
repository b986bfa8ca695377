"""When a callback has to look at the monitor: only after a step that may
have recorded a summary, so that other steps read nothing from the device."""

from __future__ import annotations

from typing import Any

from keras_gradmon.config import Frequency


def _may_have_fired(frequency: Frequency, first: int, end: int) -> bool:
    """Whether a frequency has a summary step in [first, end)."""
    if callable(frequency):
        return True
    return end > first and -(-first // frequency) * frequency < end


class SummarySchedule:
    """Follows `fit`'s batches and says when a summary may be fresh.

    It counts steps from the optimizer's iteration count at the start of
    training and the batch indices Keras passes (several steps per batch
    with `steps_per_execution`). A step skipped for non-finite gradients
    does not advance the iteration count, so our count can run ahead: when
    an expected summary is missing, the caller reports it (`found=False`)
    and the schedule says "look" on every batch until it shows up.

    Example:

    >>> schedule = SummarySchedule([10])
    >>> schedule.start(iterations=0)
    >>> schedule.epoch_start()
    >>> [schedule.due(batch) for batch in range(3)]
    [True, False, False]
    """

    def __init__(self, frequencies: list[Frequency | None]) -> None:
        self.frequencies = [f for f in frequencies if f is not None]
        self._steps_done = 0
        self._epoch_steps_done = 0
        self._pending = False

    def start(self, iterations: int) -> None:
        self._steps_done = iterations
        self._pending = False

    def epoch_start(self) -> None:
        self._epoch_steps_done = 0

    def due(self, batch: int) -> bool:
        """Whether to look after the batch with index `batch` ended."""
        first = self._steps_done
        self._steps_done += batch + 1 - self._epoch_steps_done
        self._epoch_steps_done = batch + 1
        fired = any(
            _may_have_fired(f, first, self._steps_done) for f in self.frequencies
        )
        return fired or self._pending

    def found(self, fresh: bool) -> None:
        """Reports whether the look after a due batch found a fresh summary."""
        self._pending = not fresh


def monitored_iterations(optimizer: Any) -> int:
    """The optimizer's iteration count, as a Python int (one host read)."""
    return int(optimizer.iterations.numpy())
