"""The monitor's state: its variables (`MonitorState`), created once,
written by field name inside the train step as pure functions of their
values (`VariableStore`, `ValueStore`), with the last K summaries kept in
rings (`Ring`) so that none is lost between two host reads.

A train step that calls `apply_gradients` several times per batch (a WGAN's
critic steps, `steps_per_execution`, an n-critic loop) records several
summaries before the host looks. Each summary is pushed into a ring of
`capacity` rows; the host captures the whole ring with a few raw variable
reads (`keras_gradmon.columns.Cursor` hands out the rows it has not seen).

Every scalar a summary writes lives in one of a few packed fields (`totals`,
`groups`, `grad`, `weight`, `ratio`, `update`); `Layout` gives each field
its offset in one flat vector, which is what the tag table
(`keras_gradmon.columns.TagTable`) indexes and what one compiled read brings
back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from keras import ops

from keras_gradmon import backend
from keras_gradmon.columns import COLUMNS, COUNT, Layout
from keras_gradmon.core.measurement import (
    HistogramMeasurement,
    Measurement,
)

#: Where a row's per-variable block keeps the norm and the non-finite count.
_NORM_COLUMN, _NONFINITE_COLUMN = COLUMNS.index("norm"), COLUMNS.index("nonfinite")

#: A function that creates one state variable:
#: `make_variable(name, shape, dtype, initial_value)`.
VariableFactory = Callable[[str, tuple, str, float], Any]

#: Positions in `MonitorState.step_counts`: the steps skipped so far, then
#: the steps and the clipped steps since the last summary.
SKIPPED, STEPS, CLIPPED = 0, 1, 2


class Ring:
    """`capacity` rows of one or more payloads, with the step of each row
    and the number of rows pushed so far, as state variables.

    The count and the steps share one int variable (`steps`, named
    `<prefix>_index`) of `capacity + 1` elements: the count at `COUNT`,
    then the step of each row. It starts at 0: only rows below the count
    are ever read. One variable a ring fewer is one array fewer in the
    state JAX's trainer threads through every train step. Its name is not
    the previous layout's `<prefix>_steps` (a `capacity`-element vector):
    a TensorFlow checkpoint of that layout, restored by name, leaves it at
    its start instead of failing on its shape.

    Inside the step the ring is pure: `push` maps the state values (a dict
    keyed by variable name) to new ones, which the caller writes back
    (`backend.update_if`).

    Args:
        make_variable: Creates one variable: `(name, shape, dtype, initial)`.
        prefix: Names the variables (`<prefix>_index`, `<prefix>_<payload>`).
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
        self.prefix = prefix
        self.steps_key = f"{prefix}_index"
        self.payload_keys = [f"{prefix}_{name}" for name, _, _ in payloads]
        self.steps = make_variable(self.steps_key, (capacity + 1,), "int64", 0)
        self.payloads = [
            make_variable(key, (capacity, *shape), dtype, 0)
            for key, (_, shape, dtype) in zip(self.payload_keys, payloads)
        ]

    @property
    def variables(self) -> dict[str, Any]:
        """`{name: variable}` of the count and steps, then of the payloads."""
        keys = [self.steps_key, *self.payload_keys]
        return dict(zip(keys, [self.steps, *self.payloads]))

    # Inside the step (pure) ------------------------------------------------

    def push(self, values: dict, step: Any, rows: Sequence[Any]) -> dict:
        """`values` with one row of each payload, and its step, written over
        the oldest, and the count advanced."""
        steps = values[self.steps_key]
        count = steps[COUNT]
        slot = ops.mod(count, self.capacity)
        out = dict(values)
        for key, row in zip(self.payload_keys, rows):
            out[key] = _put_row(values[key], slot, row)
        # The count and the row's step: a masked write of a few numbers.
        places = ops.arange(self.capacity + 1, dtype=steps.dtype)
        step = ops.cast(step, steps.dtype)
        steps = ops.where(ops.equal(places, slot + COUNT + 1), step, steps)
        out[self.steps_key] = ops.where(ops.equal(places, COUNT), count + 1, steps)
        return out

    def amend(self, values: dict, start: int, data: Any) -> dict:
        """`values` with `data` written over the newest row of the (one)
        payload from column `start` on: a number measured later in the
        step than the row was pushed."""
        [key] = self.payload_keys
        slot = self._newest(values)
        row = ops.take(values[key], slot, axis=0)
        data = ops.cast(data, row.dtype)
        end = start + int(data.shape[0])
        row = ops.concatenate([row[:start], data, row[end:]], 0)
        return {**values, key: _put_row(values[key], slot, row)}

    def latest(self, values: dict) -> list[Any]:
        """The newest row of each payload of the state `values`."""
        slot = self._newest(values)
        return [ops.take(values[key], slot, axis=0) for key in self.payload_keys]

    def _newest(self, values: dict) -> Any:
        return ops.mod(values[self.steps_key][COUNT] - 1, self.capacity)

    # Host side -------------------------------------------------------------

    def capture(self) -> Sequence[Any]:
        """`(count and steps, *payloads)` as array-likes, without waiting
        for them: cheap enough for the training thread (`columns.unpack`
        splits the first)."""
        return self.reader(list(self.variables.values()))

    def read_count(self) -> int:
        """How many rows were pushed so far (one host read)."""
        return int(np.asarray(self.reader([self.steps])[0])[COUNT])


def _put_row(current: Any, slot: Any, row: Any) -> Any:
    """`current` with `row` written over its row `slot` (`backend.put_row`:
    under XLA a dynamic update slice, written in place, with fewer fusions
    than a scatter)."""
    return backend.put_row(current, slot, ops.cast(row, current.dtype))


class MonitorState:
    """The variables that hold the recent statistics.

    Every scalar of a summary lives in one flat float32 row in `Layout`
    order; the last `layout.history` rows are kept in a `Ring`
    (`scalars`), so that several summaries recorded between two host
    reads all reach the recorders. Histograms are kept the same way
    (`histograms`: bucket counts, then ranges; the gradients' rows, then
    the weights'). A summary step writes one row of a few variables.
    `step_counts` holds the numbers every step may advance (`SKIPPED`,
    `STEPS`, `CLIPPED`).

    Inside the step the state is a dict of values keyed by variable name
    (`variables`); the monitor's functions map values to new values, and a
    store (`VariableStore`, or a dict of values under JAX's
    `stateless_apply`) writes them.

    Args:
        make_variable: Creates one variable (see `VariableFactory`); each
            adapter passes its own, so the state is checkpointed with the
            optimizer.
        layout: The shapes.
        clip_spec: The clipping rule's `state_spec()`, or None.
        signal_spec: The in-step signals' `state_spec()`
            (`keras_gradmon.core.signals.StepSignals`), or None.
    """

    def __init__(
        self,
        make_variable: VariableFactory,
        layout: Layout,
        clip_spec: dict | None,
        signal_spec: dict | None = None,
    ) -> None:
        self.layout = layout
        #: Maps the state variables to their live values, where a framework
        #: keeps them outside the variables (JAX's `fit`); None: the
        #: variables' own.
        self.source: Callable[[list], list] | None = None
        self._readers: dict = {}
        row = [("values", (layout.size,), "float32")]
        self.scalars = Ring(make_variable, "stats", layout.history, row, self.capture)
        # Every step: the skipped steps so far, then the steps and the
        # clipped steps since the last summary (`SKIPPED`, `STEPS`, `CLIPPED`).
        self.step_counts = make_variable("step_counts", (3,), "int64", 0)
        self.clip = {
            name: make_variable(f"clip_{name}", shape, dtype, initial)
            for name, (shape, dtype, initial) in (clip_spec or {}).items()
        }
        self.signals = {
            name: make_variable(name, shape, dtype, initial)
            for name, (shape, dtype, initial) in (signal_spec or {}).items()
        }
        self.histograms: Ring | None = None
        if layout.buckets is not None:
            self.histograms = self._histogram_ring(make_variable)

    def _histogram_ring(self, make_variable: VariableFactory) -> Ring:
        layout = self.layout
        rows = layout.num_variables * (2 if layout.weights else 1)
        payloads = [
            ("counts", (rows, layout.buckets), "int32"),
            ("ranges", (rows, 3), "float32"),
        ]
        return Ring(make_variable, "hist", layout.history, payloads, self.capture)

    @property
    def variables(self) -> dict[str, Any]:
        """Every state variable by name."""
        found = dict(self.scalars.variables)
        found.update(step_counts=self.step_counts)
        found.update({f"clip_{name}": v for name, v in self.clip.items()})
        found.update(self.signals)
        if self.histograms is not None:
            found.update(self.histograms.variables)
        return found

    def values(self) -> dict[str, Any]:
        """Every state variable's current value, by name (graph tensors
        inside the step)."""
        return {k: ops.convert_to_tensor(v) for k, v in self.variables.items()}

    # Inside the step (pure) ------------------------------------------------

    def record(self, values: dict, step: Any, measurement: Measurement) -> dict:
        """`values` with a summary step's numbers pushed: each field (by
        name) at its place in the flat row."""
        parts = []
        for name, shape in self.layout.scalar_fields():
            if name == "update":  # measured after the update (`record_updates`)
                parts.append(ops.full(shape, float("nan")))
                continue
            value = getattr(measurement, name)
            parts.append(ops.reshape(ops.cast(value, "float32"), [-1]))
        return self.scalars.push(values, step, [ops.concatenate(parts, 0)])

    def weight_norms(self, values: dict) -> Any:
        """`[num_variables]`: each variable's weight norm in the latest
        summary's row (the weights before this step's update), NaN where
        they held a non-finite element. Only where weight statistics are
        recorded."""
        start, (rows, width) = self.layout.spans["weight"]
        [row] = self.scalars.latest(values)
        block = ops.reshape(row[start : start + rows * width], [rows, width])
        norm, nonfinite = block[:, _NORM_COLUMN], block[:, _NONFINITE_COLUMN]
        return ops.where(ops.equal(nonfinite, 0), norm, float("nan"))

    def record_updates(self, values: dict, ratios: Any) -> dict:
        """`values` with the update/weight `ratios` written into the
        latest summary's row (recorded earlier in the same step)."""
        return self.scalars.amend(values, self.layout.offset("update"), ratios)

    def record_histograms(
        self, values: dict, step: Any, hist: HistogramMeasurement
    ) -> dict:
        """`values` with a histogram step's bucket counts and ranges pushed
        (gradient rows, then weight rows)."""
        counts, ranges = [hist.grad_counts], [hist.grad_range]
        if self.layout.weights:
            counts.append(hist.weight_counts)
            present = ops.ones([self.layout.num_variables, 1])
            ranges.append(ops.concatenate([hist.weight_range, present], 1))
        rows = [ops.concatenate(counts, 0), ops.concatenate(ranges, 0)]
        return self.histograms.push(values, step, rows)

    def latest_values(self) -> Any:
        """The flat row of the latest summary, as a graph tensor."""
        return self.scalars.latest(self.values())[0]

    def latest_histograms(self) -> tuple[Any, Any]:
        """`(counts, ranges)` of the latest histograms, as graph tensors."""
        counts, ranges = self.histograms.latest(self.values())
        return counts, ranges

    # Host side -------------------------------------------------------------

    def capture(self, variables: list) -> Sequence[Any]:
        """The values of `variables` (of this state), captured without
        waiting for the device (`backend.capture`)."""
        return backend.capture(variables, self.source, self._readers)

    def counts(self) -> tuple[int, int]:
        """How many summaries and histogram steps were recorded so far (one
        or two host reads)."""
        hist = 0 if self.histograms is None else self.histograms.read_count()
        return self.scalars.read_count(), hist

    def capture_scalars(self) -> Sequence[Any]:
        """The scalar ring as array-likes (`Ring.capture`), without waiting."""
        return self.scalars.capture()

    def capture_histograms(self) -> Sequence[Any] | None:
        """The histogram ring, or None when histograms are off."""
        return None if self.histograms is None else self.histograms.capture()

    # Checkpoints of the previous layout ------------------------------------

    def previous_names(self) -> list[str]:
        """The names of this state's variables, in creation order, in the
        layout before this one: each ring's count a variable of its own
        (`<prefix>_count`, before `<prefix>_steps`), and `skipped_steps`
        and `clip_counts` in place of `step_counts`."""
        parts = self._previous_parts()
        return [old for name in self.variables for old in parts.get(name, [name])]

    def upgrade(self, values: Sequence[Any]) -> list[np.ndarray]:
        """The values of `variables`, in order, from `values` saved in the
        previous layout (`previous_names`, in that order).

        Example:

        >>> state.upgrade(saved)  # doctest: +SKIP
        """
        old = dict(zip(self.previous_names(), (np.asarray(v) for v in values)))
        parts = self._previous_parts()
        out = []
        for name, variable in self.variables.items():
            joined = [np.reshape(old[p], [-1]) for p in parts.get(name, [])]
            value = np.concatenate(joined) if joined else old[name]
            if tuple(value.shape) != tuple(variable.shape):
                raise ValueError(
                    f"The saved value of the monitor state's `{name}` has shape "
                    f"{tuple(value.shape)}; this monitor's has shape "
                    f"{tuple(variable.shape)}: it was saved with other options "
                    "(`summary_history`, histograms, weight statistics, groups, "
                    "clipping, signals). Received: a checkpoint of the previous "
                    "state layout"
                )
            out.append(value)
        return out

    def _previous_parts(self) -> dict[str, list[str]]:
        """`{name: the previous layout's variables it joins, in order}`."""
        rings = [r for r in (self.scalars, self.histograms) if r is not None]
        parts = {
            r.steps_key: [f"{r.prefix}_count", f"{r.prefix}_steps"] for r in rings
        }
        parts["step_counts"] = ["skipped_steps", "clip_counts"]
        return parts


class VariableStore:
    """The state's variables as a store for `backend.update_if`: `read()`
    their values, `write()` assigns the values that changed.

    Example:

    >>> store = VariableStore(state)  # doctest: +SKIP
    >>> store.write({**store.read(), "skipped_steps": 1})  # doctest: +SKIP
    """

    def __init__(self, state: MonitorState) -> None:
        self.state = state
        self._read: dict = {}

    def read(self) -> dict:
        self._read = self.state.values()
        return dict(self._read)

    def write(self, values: dict) -> None:
        variables = self.state.variables
        for name, value in values.items():
            if value is not self._read.get(name):
                variables[name].assign(value)


class ValueStore:
    """A dict of state values as a store (JAX's `stateless_apply`, where the
    caller threads the state): `write()` replaces the values.

    Example:

    >>> store = ValueStore({"n": 0}); store.write({"n": 1}); store.values
    {'n': 1}
    """

    def __init__(self, values: dict) -> None:
        self.values = dict(values)

    def read(self) -> dict:
        return dict(self.values)

    def write(self, values: dict) -> None:
        self.values.update(values)
