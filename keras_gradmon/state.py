"""The monitor's variables: created once, assigned by field name inside the
train step, read back on the host as plain NumPy numbers.

Every scalar a summary writes lives in one of a few packed fields (`totals`,
`groups`, `grad`, `weight`, `ratio`); `Layout` gives each field its offset in
one flat vector, which is what the tag table (`keras_gradmon.tags`) indexes
and what one compiled read brings back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from keras import ops

from keras_gradmon import backend
from keras_gradmon.history import NO_STEP, Ring
from keras_gradmon.measurement import HistogramMeasurement, Measurement
from keras_gradmon.schema import COLUMNS, Layout
from keras_gradmon.snapshots import HistogramSnapshot, Snapshot

#: A function that creates one state variable:
#: `make_variable(name, shape, dtype, initial_value)`.
VariableFactory = Callable[[str, tuple, str, float], Any]

__all__ = [
    "COLUMNS",
    "NO_STEP",
    "HistogramSnapshot",
    "Layout",
    "MonitorState",
    "Snapshot",
    "ValueStore",
    "VariableStore",
]


class MonitorState:
    """The variables that hold the recent statistics.

    Every scalar of a summary lives in one flat float32 row in `Layout`
    order; the last `layout.history` rows are kept in a `Ring`
    (`scalars`), so that several summaries recorded between two host
    reads all reach the recorders. Histograms are kept the same way
    (`histograms`: bucket counts, then ranges; the gradients' rows, then
    the weights'). A summary step writes one row of a few variables.

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
            (`keras_gradmon.signals.step.StepSignals`), or None.
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
        # Every step: the skipped steps so far, and [steps, clipped steps]
        # since the last summary.
        self.skipped = make_variable("skipped_steps", (), "int64", 0)
        self.clip_counts = make_variable("clip_counts", (2,), "int64", 0)
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
        found.update(skipped_steps=self.skipped, clip_counts=self.clip_counts)
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
            value = value.stack() if name == "totals" else value
            parts.append(ops.reshape(ops.cast(value, "float32"), [-1]))
        return self.scalars.push(values, step, [ops.concatenate(parts, 0)])

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
