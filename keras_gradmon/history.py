"""The last K recorded summaries, kept in the monitor's state so that no
recorded step is lost between two host reads.

A train step that calls `apply_gradients` several times per batch (a WGAN's
critic steps, `steps_per_execution`, an n-critic loop) records several
summaries before the host looks. Each summary is pushed into a ring of
`capacity` rows; the host captures the whole ring with a few raw variable
reads, and a `Cursor` hands out every row it has not seen yet, in step
order, and counts the rows that were overwritten before it looked.

Example:

>>> cursor = Cursor(capacity=4)
>>> count, steps = 6, np.array([4, 5, 2, 3])      # rows of steps 2..5
>>> [entry.step for entry in cursor.new(count, steps, [np.arange(4)])[0]]
[2, 3, 4, 5]
>>> cursor.dropped                                # steps 0 and 1 were lost
2
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_gradmon.reading import Reader

NO_STEP = -1


class Ring:
    """`capacity` rows of one or more payloads, with the step of each row
    and the number of rows pushed so far, as state variables.

    Args:
        make_variable: Creates one variable: `(name, shape, dtype, initial)`.
        prefix: Names the variables (`<prefix>_count`, `<prefix>_steps`,
            `<prefix>_<payload>`).
        capacity: How many rows are kept.
        payloads: `(name, row shape, dtype)` of each payload.
    """

    def __init__(
        self,
        make_variable: Callable[..., Any],
        prefix: str,
        capacity: int,
        payloads: Sequence[tuple[str, tuple[int, ...], str]],
    ) -> None:
        self.capacity = capacity
        self.count = make_variable(f"{prefix}_count", (), "int64", 0)
        self.steps = make_variable(f"{prefix}_steps", (capacity,), "int64", NO_STEP)
        self.payloads = [
            make_variable(f"{prefix}_{name}", (capacity, *shape), dtype, 0)
            for name, shape, dtype in payloads
        ]
        self._readers = [Reader(v) for v in (self.count, self.steps, *self.payloads)]

    # Inside the step -------------------------------------------------------

    def push(self, step: tf.Tensor, rows: Sequence[tf.Tensor]) -> None:
        """Writes one row of each payload, and its step, over the oldest."""
        count = tf.convert_to_tensor(self.count)
        slot = tf.reshape(tf.math.floormod(count, self.capacity), [1, 1])
        for variable, row in zip(self.payloads, rows):
            _assign_row(variable, slot, row)
        _assign_row(self.steps, slot, tf.cast(step, tf.int64))
        self.count.assign(count + 1)

    def latest(self) -> list[tf.Tensor]:
        """The newest row of each payload, as graph tensors."""
        count = tf.convert_to_tensor(self.count)
        slot = tf.math.floormod(count - 1, self.capacity)
        return [tf.convert_to_tensor(v)[slot] for v in self.payloads]

    # Host side -------------------------------------------------------------

    def capture(self) -> tuple[tf.Tensor, ...]:
        """`(count, steps, *payloads)` as tensors, without waiting for them:
        raw variable reads, cheap enough for the training thread."""
        return tuple(read() for read in self._readers)

    def read_count(self) -> int:
        """How many rows were pushed so far (one host read)."""
        return int(self._readers[0]())


def _assign_row(variable: Any, slot: tf.Tensor, row: tf.Tensor) -> None:
    current = tf.convert_to_tensor(variable)
    row = tf.cast(row, current.dtype)[tf.newaxis]
    variable.assign(tf.tensor_scatter_nd_update(current, slot, row))


@dataclasses.dataclass(frozen=True)
class Entry:
    """One recorded row: its step and its payloads, as NumPy data."""

    step: int
    payloads: tuple[np.ndarray, ...]


class Cursor:
    """What a host reader has seen of a `Ring`.

    Attributes:
        seen: The ring's count at the last look.
        dropped: Rows overwritten before this reader saw them, so far.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.seen = 0
        self.dropped = 0

    def new(
        self, count: Any, steps: Any, payloads: Sequence[Any]
    ) -> tuple[list[Entry], int]:
        """The rows pushed since the last look, oldest first, and how many
        more were pushed but already overwritten (also added to `dropped`)."""
        count = int(count)
        first = max(self.seen, count - self.capacity)
        lost = max(0, first - self.seen)
        self.dropped += lost
        self.seen = max(self.seen, count)
        if first >= count:
            return [], lost
        steps, arrays = np.asarray(steps), [np.asarray(p) for p in payloads]
        entries = []
        for index in range(first, count):
            slot = index % self.capacity
            rows = tuple(array[slot] for array in arrays)
            entries.append(Entry(int(steps[slot]), rows))
        return entries, lost


def unpack(captured: Sequence[Any]) -> tuple[Any, Any, tuple]:
    """`(count, steps, payloads)` of a captured ring (`Ring.capture`)."""
    return captured[0], captured[1], tuple(captured[2:])


def latest_entry(
    capacity: int, count: Any, steps: Any, payloads: Sequence[Any]
) -> Entry | None:
    """The newest row of a captured ring, or None when nothing was pushed."""
    count = int(count)
    if count == 0:
        return None
    slot = (count - 1) % capacity
    rows = tuple(np.asarray(p)[slot] for p in payloads)
    return Entry(int(np.asarray(steps)[slot]), rows)
