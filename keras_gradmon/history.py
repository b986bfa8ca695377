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
from keras import ops

NO_STEP = -1


class Ring:
    """`capacity` rows of one or more payloads, with the step of each row
    and the number of rows pushed so far, as state variables.

    Inside the step the ring is pure: `push` maps the state values (a dict
    keyed by variable name) to new ones, which the caller writes back
    (`backend.update_if`).

    Args:
        make_variable: Creates one variable: `(name, shape, dtype, initial)`.
        prefix: Names the variables (`<prefix>_count`, `<prefix>_steps`,
            `<prefix>_<payload>`).
        capacity: How many rows are kept.
        payloads: `(name, row shape, dtype)` of each payload.
        reader: Captures variables on the host (`MonitorState.capture`).
    """

    def __init__(
        self,
        make_variable: Callable[..., Any],
        prefix: str,
        capacity: int,
        payloads: Sequence[tuple[str, tuple[int, ...], str]],
        reader: Callable[[list], Sequence[Any]],
    ) -> None:
        self.capacity = capacity
        self.reader = reader
        self.count_key, self.steps_key = f"{prefix}_count", f"{prefix}_steps"
        self.payload_keys = [f"{prefix}_{name}" for name, _, _ in payloads]
        self.count = make_variable(self.count_key, (), "int64", 0)
        self.steps = make_variable(self.steps_key, (capacity,), "int64", NO_STEP)
        self.payloads = [
            make_variable(key, (capacity, *shape), dtype, 0)
            for key, (_, shape, dtype) in zip(self.payload_keys, payloads)
        ]

    @property
    def variables(self) -> dict[str, Any]:
        """`{name: variable}` of the count, the steps and the payloads."""
        keys = [self.count_key, self.steps_key, *self.payload_keys]
        return dict(zip(keys, [self.count, self.steps, *self.payloads]))

    # Inside the step (pure) ------------------------------------------------

    def push(self, values: dict, step: Any, rows: Sequence[Any]) -> dict:
        """`values` with one row of each payload, and its step, written over
        the oldest, and the count advanced."""
        count = values[self.count_key]
        slot = ops.reshape(ops.mod(count, self.capacity), [1, 1])
        out = dict(values)
        for key, row in zip(self.payload_keys, rows):
            out[key] = _put_row(values[key], slot, row)
        out[self.steps_key] = _put_row(values[self.steps_key], slot, step)
        out[self.count_key] = count + 1
        return out

    def amend(self, values: dict, start: int, data: Any) -> dict:
        """`values` with `data` written over the newest row of the (one)
        payload from column `start` on: a number measured later in the
        step than the row was pushed."""
        [key] = self.payload_keys
        slot = ops.mod(values[self.count_key] - 1, self.capacity)
        row = ops.take(values[key], slot, axis=0)
        data = ops.cast(data, row.dtype)
        end = start + int(data.shape[0])
        row = ops.concatenate([row[:start], data, row[end:]], 0)
        return {**values, key: _put_row(values[key], ops.reshape(slot, [1, 1]), row)}

    def latest(self, values: dict) -> list[Any]:
        """The newest row of each payload of the state `values`."""
        slot = ops.mod(values[self.count_key] - 1, self.capacity)
        return [ops.take(values[key], slot, axis=0) for key in self.payload_keys]

    # Host side -------------------------------------------------------------

    def capture(self) -> Sequence[Any]:
        """`(count, steps, *payloads)` as array-likes, without waiting for
        them: cheap enough for the training thread."""
        return self.reader(list(self.variables.values()))

    def read_count(self) -> int:
        """How many rows were pushed so far (one host read)."""
        return int(np.asarray(self.reader([self.count])[0]))


def _put_row(current: Any, slot: Any, row: Any) -> Any:
    row = ops.expand_dims(ops.cast(row, current.dtype), 0)
    return ops.scatter_update(current, slot, row)


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
