"""`GradientMonitor`: the framework-neutral core that runs inside the step:
clip, decide whether the step is applied, measure on due steps, and the
update/weight ratios after the update.

What the monitor does on every step, due or not: clip, take the norm in
for the every-step signals, and decide whether the step is applied
(`GradientMonitor` inherits it; see `keras_gradmon.core.monitor`).

Example:

>>> outcome = monitor.clip(grads, indices)        # doctest: +SKIP
>>> applied, gate = monitor.decide(step, outcome)  # doctest: +SKIP

What one summary step records, as pure functions of the state values:
the step's inputs, the one conditional around them, and the clip numbers.

`GradientMonitor.measure` builds on these: the state values go in, new
values come out (`backend.update_if` writes them), so the same code runs in
a TensorFlow graph and under `jax.jit`.

Example:

>>> either_of(Due(True, False))
True

`GradientMonitor`: the framework-neutral core that runs inside the step.

An adapter (Keras 3, tf_keras, `tf.compat.v1.train`) calls its steps in its
own order:

```python
outcome = monitor.clip(grads, indices)          # every step (if configured)
verdict = outcome.finite                        # or a loss scaler's own test
monitor.count_skipped(verdict)
due = monitor.measure(step, grads, indices, clip=outcome, applied=verdict)
```

or `monitor.process(step, grads, indices)`, which does exactly that. Data
flows one way: step -> `MonitorState` -> recorders. Measuring adds one graph
conditional to a step that records nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from keras import ops

from keras_gradmon import backend
from keras_gradmon.columns import (
    NO_STEP,
    HistogramSnapshot,
    Snapshot,
    TagTable,
    latest_entry,
    unpack,
)
from keras_gradmon.core.clipping import as_gradient
from keras_gradmon.core.clipping.base import global_norm_of
from keras_gradmon.core.config import MonitorConfig
from keras_gradmon.core.measurement import (
    ClipOutcome,
    Due,
    Processed,
    histogram_measurement,
    scalar_measurement,
)
from keras_gradmon.core.signals import StepSignals, update_ratios
from keras_gradmon.core.state import (
    CLIPPED,
    SKIPPED,
    STEPS,
    Layout,
    MonitorState,
    VariableFactory,
    VariableStore,
)
from keras_gradmon.naming import match_groups, unique_paths
from keras_gradmon.schedule import Schedule, measures, plan


class EveryStep:
    """The every-step half of `GradientMonitor`: it reads the monitor's
    `config`, `clip_rule`, `signals`, `state` and `_weights`."""

    def clip(
        self,
        grads: Sequence[Any],
        indices: Sequence[int],
        store: Any = None,
        weights: Mapping[int, Any] | None = None,
    ) -> ClipOutcome | None:
        """Clips `grads` as configured (every step) and tells whether every
        element is finite. None when neither clipping nor `skip_nonfinite`
        is configured, nor a signal that reads every step's norm: then
        nothing is computed for it. `weights`: the variables' values by
        row, where they are not the variables' own."""
        if not self.works_every_step:
            return None
        rows = [k for k, g in enumerate(grads) if g is not None]
        given = [as_gradient(grads[k]) for k in rows]  # IndexedSlices kept
        norm = global_norm_of(given)
        pre_norm = ops.cast(norm.exact, "float32")
        out = list(grads)
        if self.clip_rule is None:
            return ClipOutcome(out, pre_norm, pre_norm, norm.finite)
        store = store or VariableStore(self.state)
        values = store.read()
        by_row = self._weights(weights, force=True)
        result = self.clip_rule.clip(
            given,
            [by_row[indices[k]] for k in rows],
            norm,
            {name: values[f"clip_{name}"] for name in self.state.clip},
        )
        new = {f"clip_{name}": value for name, value in result.state.items()}
        clipped = ops.cast(result.post_norm < pre_norm, "int32")
        counts = values["step_counts"]  # [skipped, steps, clipped]
        new["step_counts"] = counts + ops.cast(ops.stack([0, 1, clipped]), counts.dtype)
        store.write(new)
        for k, g in zip(rows, result.grads):
            out[k] = g
        return ClipOutcome(out, pre_norm, result.post_norm, norm.finite)

    @property
    def works_every_step(self) -> bool:
        """Whether the monitor computes something on every step (clipping,
        `skip_nonfinite`, an every-step signal), not only on due steps."""
        return bool(
            self.clip_rule is not None
            or self.config.skip_nonfinite
            or self.signals.needs_norm
        )

    def count_skipped(self, applied: Any, store: Any = None) -> None:
        """Counts a step that will not be applied (`applied` false)."""
        store = store or VariableStore(self.state)
        counts = store.read()["step_counts"]  # [skipped, steps, clipped]
        missed = ops.cast(ops.logical_not(applied), counts.dtype)
        zero = ops.zeros_like(missed)
        store.write({"step_counts": counts + ops.stack([missed, zero, zero])})

    def decide(
        self,
        step: Any,
        outcome: ClipOutcome | None,
        store: Any = None,
        scaler: Any = None,
        parts: Any = None,
    ) -> tuple[Any, Any]:
        """Whether this step is applied, after the every-step signals took
        its norm (and its gradient's `parts`, for the noise scale: a
        `signals.parts.Replicas` or `MicroBatches`) in; the skip counted.

        Returns:
            `(applied, gate)`: `applied` says whether the update happens
            (`skip_nonfinite`, `skip_spikes`, and `scaler`: a loss scaler's
            own verdict); `gate` is what the adapter must gate the inner
            optimizer on (the loss scaler gates itself). Python True where
            nothing can skip.
        """
        store = store or VariableStore(self.state)
        gate: Any = True
        if outcome is not None and self.config.skip_nonfinite and scaler is None:
            gate = outcome.finite
        if outcome is not None and self.signals.needs_norm:
            values = store.read()
            spike, new = self.signals.observe(values, outcome, step, parts)
            store.write(new)
            if spike is not False:
                gate = ops.logical_and(gate, ops.logical_not(spike))
        applied = gate if scaler is None else ops.logical_and(scaler, gate)
        if applied is not True:
            self.count_skipped(applied, store)
        return applied, gate


_NAN = float("nan")


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What a summary step measures: the step, the gradients and weights by
    row, the clip outcome and the loss scale."""

    step: Any
    grads: dict[int, Any]
    weights: dict[int, Any] | None
    clip: ClipOutcome | None
    loss_scale: Any


def either_of(due: Due) -> Any:
    """The one conditional around a step's recording: the only gated kind,
    or either of two (a Python bool where no conditional is needed)."""
    scalars, histograms = due.scalars, due.histograms
    if scalars is True or histograms is True:
        return True
    if scalars is False:
        return histograms
    if histograms is False:
        return scalars
    return ops.logical_or(scalars, histograms)


def within(due: Due, either: Any) -> Due:
    """`due` as it stands inside the conditional on `either` (`either_of`):
    a gate that is `either` itself holds there, so nothing tests it again.

    Example:

    >>> due = Due(object(), False)
    >>> within(due, due.scalars)
    Due(scalars=True, histograms=False)
    """
    return Due(
        *(True if gate is either else gate for gate in (due.scalars, due.histograms))
    )


def when(
    pred: Any,
    either: Any,
    fn: Callable[[Inputs, dict], dict],
    inputs: Inputs,
    values: dict,
) -> dict:
    """`fn(inputs, values)` where `pred` holds (inside the conditional on
    `either`: a `pred` that is `either` itself holds there), else `values`."""
    if pred is False:
        return values
    if pred is True or pred is either:
        return fn(inputs, values)
    return backend.cond(pred, lambda: fn(inputs, values), lambda: values)


def clip_totals(
    clip: ClipOutcome | None, values: dict, clipping: bool
) -> dict[str, Any]:
    """The clip numbers of a summary (none without a clip outcome; no
    fraction without a clipping rule); resets the clip counters in
    `values`."""
    if clip is None:
        return {}
    pre, post = clip.pre_norm, clip.post_norm
    totals = dict(
        clip_pre_norm=pre,
        clip_post_norm=post,
        clip_scale=ops.where(ops.equal(pre, 0.0), 1.0, post / pre),
    )
    if clipping:
        counts = values["step_counts"]  # [skipped, steps, clipped]
        steps, clipped = (ops.cast(counts[k], "float32") for k in (STEPS, CLIPPED))
        totals["clip_fraction"] = clipped / ops.maximum(steps, 1.0)
        reset = ops.zeros_like(counts[STEPS:])  # the skipped steps stay
        values["step_counts"] = ops.concatenate([counts[:STEPS], reset], 0)
    return totals


_NAN = float("nan")


class GradientMonitor(EveryStep):
    """Measures (and clips) gradients inside the train step.

    Args:
        config: The monitor's options.
        loss_scaled: Whether the gradients come from a loss scaler (its
            scale and skipped steps are then recorded).

    Example:

    >>> monitor = GradientMonitor(MonitorConfig(every_n_steps=1))
    >>> from keras_gradmon.legacy.stepped import make_tf_variable
    >>> monitor.build([tf.Variable([1.0, 2.0], name="w")], make_tf_variable)
    >>> _ = monitor.process(tf.constant(0), [tf.constant([3.0, 4.0])], [0])
    >>> monitor.snapshot().totals["grad_norm"]
    5.0
    """

    def __init__(self, config: MonitorConfig, loss_scaled: bool = False) -> None:
        self.config = config
        self.loss_scaled = loss_scaled
        self.schedule = Schedule(config.every_n_steps, "every_n_steps")
        self.histogram_schedule = Schedule(
            config.histogram_every_n_steps, "histogram_every_n_steps"
        )
        self.clip_rule = config.clip_rule
        self.signals = StepSignals(
            config.track_spikes, config.skip_spikes, config.noise_scale
        )
        self.built = False

    def build(self, variables: Sequence[Any], make_variable: VariableFactory) -> None:
        """Creates the state and the tag table for `variables` (in the
        optimizer's order)."""
        self.variables = list(variables)
        self.paths = unique_paths(self.variables)
        self.group_members = match_groups(self.config.groups, self.paths)
        histograms = not self.histogram_schedule.never
        self.layout = Layout(
            num_variables=len(self.variables),
            num_groups=len(self.group_members),
            weights=self.config.weight_statistics,
            buckets=self.config.histogram_buckets if histograms else None,
            history=self.config.summary_history,
            updates=self.config.update_statistics,
        )
        spec = self.clip_rule.state_spec() if self.clip_rule else None
        signals = self.signals.state_spec()
        self.state = MonitorState(make_variable, self.layout, spec, signals)
        self.use_scope(None)
        self.built = True

    def use_scope(self, scope: str | None) -> None:
        """Writes every tag under `scope` (None: the configured `tag_scope`)
        from now on; `tags.scope` says which. Example: `use_scope("actor")`."""
        scope = self.config.replace(tag_scope=scope).tag_scope
        groups = list(self.group_members)
        self.tags = TagTable.build(
            self.config, self.paths, groups, self.layout, self.loss_scaled, scope
        )

    # Inside the step ---------------------------------------------------------
    #
    # Each step reads the state from `store` (the state's variables unless
    # given: JAX's `stateless_apply` passes a `ValueStore`), computes new
    # values with pure functions and writes them back.

    def measure(
        self,
        step: Any,
        grads: Sequence[Any],
        indices: Sequence[int],
        clip: ClipOutcome | None = None,
        applied: Any = None,
        loss_scale: Any = None,
        store: Any = None,
        weights: Mapping[int, Any] | None = None,
    ) -> Due:
        """Records the statistics of `grads` on due steps (only where
        `applied` holds, if given: a rejected step's number comes again).

        Args:
            step: The integer step (any int dtype) the gradients belong to.
            grads: The gradients as measured (pre-clip), None for none.
            indices: The row (built variable order) of each gradient.
            clip: This step's `clip()` outcome, for the clip numbers.
            applied: Whether the step will be applied.
            loss_scale: The loss scale `grads` were unscaled by.
            store: Where the state is read and written (default: the
                state's variables).
            weights: The variables' values by row, where they are not the
                variables' own (JAX's `stateless_apply`).

        Returns:
            Whether scalars / histograms were recorded at this step: Python
            False for both, and nothing built, in a trace under
            `measuring(False)`.
        """
        options = dict(clip=clip, applied=applied, loss_scale=loss_scale)
        options.update(store=store, weights=weights)
        return self.measure_holding(step, grads, indices, None, **options)[0]

    def measure_holding(
        self,
        step: Any,
        grads: Sequence[Any],
        indices: Sequence[int],
        hold: tuple[Sequence[Any], Sequence[int]] | None,
        clip: ClipOutcome | None = None,
        applied: Any = None,
        loss_scale: Any = None,
        store: Any = None,
        weights: Mapping[int, Any] | None = None,
    ) -> tuple[Due, dict[int, Any] | None]:
        """`measure`, and, for `hold = (variables, rows)`, the variables'
        values before the update where the update ratios are due, held in
        the same conditional (`backend.update_holding`: one test of the
        step where `measure` and `weights_before` make two), by row; None
        where no update ratio is recorded. For the frameworks that update
        the variables in place (TensorFlow)."""
        if not measures():
            return Due(False, False), None
        step = ops.cast(step, backend.step_dtype())
        by_row = {i: g for g, i in zip(grads, indices) if g is not None}
        allowed = True if applied is None else applied
        due = self._due(step, allowed)
        either = either_of(due)
        inputs = Inputs(step, by_row, self._weights(weights), clip, loss_scale)

        def record(values: dict) -> dict:
            values = when(due.scalars, either, self._statistics, inputs, values)
            return when(due.histograms, either, self._histograms, inputs, values)

        store = store or VariableStore(self.state)
        if hold is None or not self.layout.updates or due.scalars is False:
            backend.update_if(either, record, store)
            return due, None
        scalars = within(due, either).scalars
        held = backend.update_holding(either, record, store, scalars, list(hold[0]))
        return due, dict(zip(hold[1], held))

    def _due(self, step: Any, allowed: Any) -> Due:
        """What `measure` records at `step` where `allowed` holds: as each
        schedule gates it, or, in a program the host planned
        (`schedule.planned`), what the host knows is due, with no test of
        the step."""
        known = plan()
        if known is None:
            return Due(
                self.schedule.gate(step, allowed),
                self.histogram_schedule.gate(step, allowed),
            )
        scalars, histograms = known
        return Due(
            allowed if scalars and not self.schedule.never else False,
            allowed if histograms and not self.histogram_schedule.never else False,
        )

    def process(
        self,
        step: Any,
        grads: Sequence[Any],
        indices: Sequence[int],
        store: Any = None,
        weights: Mapping[int, Any] | None = None,
        parts: Any = None,
        hold: tuple[Sequence[Any], Sequence[int]] | None = None,
    ) -> Processed:
        """`clip`, then decide the skip (with `skip_nonfinite`: where not
        finite), then `measure`: the whole in-step work for an inner optimizer
        that applies every step it is given. A skipped step is measured too:
        its statistics show the NaN/Inf that caused the skip (the skip is
        counted first, so they show it too). `parts`: how the gradient
        splits, for the noise scale (see `decide`); `hold`: as for
        `measure_holding`."""
        store = store or VariableStore(self.state)
        outcome = self.clip(grads, indices, store, weights)
        verdict, _ = self.decide(step, outcome, store, parts=parts)
        due, before = self.measure_holding(
            step, grads, indices, hold, clip=outcome, store=store, weights=weights
        )
        handed_on = list(grads) if outcome is None else outcome.grads
        return Processed(handed_on, verdict, due, before)

    def measure_updates(
        self,
        due: Due,
        old: Mapping[int, Any],
        new: Mapping[int, Any],
        store: Any = None,
    ) -> None:
        """Records the update/weight ratios of this step's update into the
        summary `measure` recorded (where `due.scalars` holds).

        Args:
            due: What `measure` returned for this step.
            old: The weights before the update, by row (on TensorFlow, the
                values `weights_before` held).
            new: The weights after it, by row.
            store: As for `measure`.
        """
        if not self.layout.updates or due.scalars is False:
            return
        members = list(self.group_members.values())

        def record(values: dict) -> dict:
            # The weights' norms are in the row `measure` just recorded.
            sizes = self.state.weight_norms(values) if self.layout.weights else None
            ratios = update_ratios(old, new, len(self.variables), members, sizes)
            return self.state.record_updates(values, ratios)

        backend.update_if(due.scalars, record, store or VariableStore(self.state))

    def weights_before(
        self, due: Due, variables: Sequence[Any], rows: Sequence[int]
    ) -> dict[int, Any] | None:
        """The weights before the inner optimizer's update, by row, where the
        update ratios are due (`backend.values_if`: nothing weight-sized held
        on other steps); None when no update ratio is recorded. For the
        frameworks that update the variables in place (TensorFlow); JAX's
        `stateless_apply` has both values already."""
        if not self.layout.updates or due.scalars is False:
            return None
        return dict(zip(rows, backend.values_if(due.scalars, list(variables))))

    def record_updates(
        self,
        due: Due,
        before: Mapping[int, Any] | None,
        variables: Sequence[Any],
        rows: Sequence[int],
    ) -> None:
        """`measure_updates` from `weights_before`'s values to the variables'
        values now (read inside the due branch)."""
        if before is not None:
            self.measure_updates(due, before, dict(zip(rows, variables)))

    def _weights(
        self, given: Mapping[int, Any] | None, force: bool = False
    ) -> dict[int, Any] | None:
        """The weights by row: `given`, else the variables' values; None
        when weight statistics are off (unless `force`)."""
        if not (self.layout.weights or force):
            return None
        if given is not None:
            return dict(given)
        return {i: ops.convert_to_tensor(v) for i, v in enumerate(self.variables)}

    @property
    def _unpack_large(self) -> bool:
        """Whether the statistics take `batched_statistics`'s unmasked pass
        (`backend.unmasked_pays`)."""
        return backend.unmasked_pays(self.schedule.always)

    def _statistics(self, inputs: Inputs, values: dict) -> dict:
        """`values` with this step's scalar statistics pushed."""
        values = dict(values)
        signals, values = self.signals.totals(values)
        totals = dict(
            **clip_totals(inputs.clip, values, self.clip_rule is not None),
            **signals,
            skipped_steps=ops.cast(values["step_counts"][SKIPPED], "float32"),
        )
        if inputs.loss_scale is not None:
            totals["loss_scale"] = inputs.loss_scale
        measurement = scalar_measurement(
            inputs.grads,
            inputs.weights,
            len(self.variables),
            self.config.statistics,
            list(self.group_members.values()),
            totals,
            unpack_large=self._unpack_large,
        )
        return self.state.record(values, inputs.step, measurement)

    def _histograms(self, inputs: Inputs, values: dict) -> dict:
        """`values` with this step's histograms pushed."""
        measurement = histogram_measurement(
            inputs.grads,
            inputs.weights,
            len(self.variables),
            self.layout.buckets,
            unpack_large=backend.unmasked_pays(self.histogram_schedule.always),
        )
        return self.state.record_histograms(values, inputs.step, measurement)

    # Host side -----------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The latest scalar statistics as NumPy data (one host read)."""
        entry = latest_entry(self.layout.history, *unpack(self.state.capture_scalars()))
        if entry is None:
            return self.scalar_values(NO_STEP, np.zeros(self.layout.size, np.float32))
        return self.scalar_values(entry.step, *entry.payloads)

    def histogram_snapshot(self) -> HistogramSnapshot | None:
        """The latest histograms as NumPy data, or None if histograms are off
        or none were recorded yet."""
        captured = self.state.capture_histograms()
        if captured is None:
            return None
        entry = latest_entry(self.layout.history, *unpack(captured))
        if entry is None:
            return None
        return self.histogram_values(entry.step, *entry.payloads)

    def histogram_values(
        self, step: Any, counts: Any, ranges: Any
    ) -> HistogramSnapshot:
        """A `HistogramSnapshot` of captured `(step, counts, ranges)`."""
        weights = self.layout.weights
        return HistogramSnapshot.of_captured(step, counts, ranges, self.paths, weights)

    def scalar_values(self, step: Any, values: Any) -> Snapshot:
        """A `Snapshot` of captured `(step, values)`."""
        groups = self.group_members
        return Snapshot.of_captured(step, values, self.paths, groups, self.layout)
