"""`GradientMonitor`: the framework-neutral core that runs inside the step.

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

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_gradmon.clipping import as_gradient, global_norm_of
from keras_gradmon.config import MonitorConfig
from keras_gradmon.graph import run_if
from keras_gradmon.history import NO_STEP, latest_entry, unpack
from keras_gradmon.measurement import (
    ClipOutcome,
    Due,
    Processed,
    histogram_measurement,
    scalar_measurement,
)
from keras_gradmon.naming import match_groups, unique_paths
from keras_gradmon.schedule import Schedule
from keras_gradmon.state import (
    HistogramSnapshot,
    Layout,
    MonitorState,
    Snapshot,
    VariableFactory,
)
from keras_gradmon.tags import TagTable

_NAN = float("nan")


class GradientMonitor:
    """Measures (and clips) gradients inside the train step.

    Args:
        config: The monitor's options.
        loss_scaled: Whether the gradients come from a loss scaler (its
            scale and skipped steps are then recorded).

    Example:

    >>> monitor = GradientMonitor(MonitorConfig(every_n_steps=1))
    >>> from keras_gradmon.adapters.base import make_tf_variable
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
        )
        spec = self.clip_rule.state_spec() if self.clip_rule else None
        self.state = MonitorState(make_variable, self.layout, spec)
        self.use_scope(None)
        self.built = True

    def use_scope(self, scope: str | None) -> None:
        """Writes every tag under `scope` (None: the configured `tag_scope`)
        from now on; `tags.scope` says which. Example: `use_scope("actor")`."""
        self.tags = TagTable.of(self, self.config.replace(tag_scope=scope).tag_scope)

    # Inside the step ---------------------------------------------------------

    def clip(self, grads: Sequence[Any], indices: Sequence[int]) -> ClipOutcome | None:
        """Clips `grads` as configured (every step) and tells whether every
        element is finite. None when neither clipping nor `skip_nonfinite`
        is configured: then nothing is computed for it."""
        if self.clip_rule is None and not self.config.skip_nonfinite:
            return None
        rows = [k for k, g in enumerate(grads) if g is not None]
        given = [as_gradient(grads[k]) for k in rows]  # IndexedSlices kept
        norm = global_norm_of(given)
        pre_norm = tf.cast(norm.exact, tf.float32)
        out = list(grads)
        if self.clip_rule is None:
            return ClipOutcome(out, pre_norm, pre_norm, norm.finite)
        weights = [tf.convert_to_tensor(self.variables[indices[k]]) for k in rows]
        state = {k: tf.convert_to_tensor(v) for k, v in self.state.clip.items()}
        result = self.clip_rule.clip(given, weights, norm, state)
        for name, value in result.state.items():
            self.state.clip[name].assign(value)
        clipped = tf.cast(result.post_norm < pre_norm, tf.int64)
        self.state.clip_counts.assign_add(tf.stack([tf.constant(1, tf.int64), clipped]))
        for k, g in zip(rows, result.grads):
            out[k] = g
        return ClipOutcome(out, pre_norm, result.post_norm, norm.finite)

    def count_skipped(self, applied: tf.Tensor) -> None:
        """Counts a step that will not be applied (`applied` false)."""
        self.state.skipped.assign_add(tf.cast(tf.logical_not(applied), tf.int64))

    def measure(
        self,
        step: Any,
        grads: Sequence[Any],
        indices: Sequence[int],
        clip: ClipOutcome | None = None,
        applied: tf.Tensor | None = None,
        loss_scale: tf.Tensor | None = None,
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

        Returns:
            Whether scalars / histograms were recorded at this step.
        """
        step = tf.cast(step, tf.int64)
        by_row = {i: g for g, i in zip(grads, indices) if g is not None}
        allowed = True if applied is None else applied
        scalars = self.schedule.gate(step, allowed)
        histograms = self.histogram_schedule.gate(step, allowed)

        def record_scalars() -> None:
            self._record_statistics(step, by_row, clip, loss_scale)

        def record_both() -> None:
            run_if(scalars, record_scalars)
            run_if(histograms, lambda: self._record_histograms(step, by_row))

        either: tf.Tensor | bool = True
        if not isinstance(scalars, bool) and not isinstance(histograms, bool):
            # One conditional on a step that is due for neither.
            either = tf.logical_or(scalars, histograms)
        run_if(either, record_both)
        return Due(scalars, histograms)

    def process(
        self, step: Any, grads: Sequence[Any], indices: Sequence[int]
    ) -> Processed:
        """`clip`, then decide the skip (with `skip_nonfinite`: where not
        finite), then `measure`: the whole in-step work for an inner optimizer
        that applies every step it is given. A skipped step is measured too:
        its statistics show the NaN/Inf that caused the skip (the skip is
        counted first, so they show it too)."""
        outcome = self.clip(grads, indices)
        verdict: tf.Tensor | bool = True
        if outcome is not None and self.config.skip_nonfinite:
            verdict = outcome.finite
            self.count_skipped(verdict)
        due = self.measure(step, grads, indices, clip=outcome)
        handed_on = list(grads) if outcome is None else outcome.grads
        return Processed(handed_on, verdict, due)

    def _weights(self) -> dict[int, tf.Tensor] | None:
        if not self.layout.weights:
            return None
        return {i: tf.convert_to_tensor(v) for i, v in enumerate(self.variables)}

    def _record_statistics(
        self,
        step: tf.Tensor,
        grads: dict[int, Any],
        clip: ClipOutcome | None,
        loss_scale: tf.Tensor | None,
    ) -> None:
        extra = dict(
            **self._clip_totals(clip),
            skipped_steps=tf.cast(self.state.skipped, tf.float32),
            loss_scale=_NAN if loss_scale is None else loss_scale,
        )
        measurement = scalar_measurement(
            grads,
            self._weights(),
            len(self.variables),
            self.config.statistics,
            list(self.group_members.values()),
            extra,
        )
        self.state.record(step, measurement)

    def _clip_totals(self, clip: ClipOutcome | None) -> dict[str, Any]:
        """The clip numbers of a summary; resets the clip counters."""
        nan = tf.constant(_NAN)
        if clip is None:
            return dict(
                clip_pre_norm=nan,
                clip_post_norm=nan,
                clip_scale=nan,
                clip_fraction=nan,
            )
        pre, post = clip.pre_norm, clip.post_norm
        scale = tf.where(tf.equal(pre, 0.0), 1.0, post / pre)
        fraction = nan
        if self.clip_rule is not None:
            counts = tf.cast(self.state.clip_counts, tf.float32)
            fraction = counts[1] / tf.maximum(counts[0], 1.0)
            self.state.clip_counts.assign(tf.zeros([2], tf.int64))
        return dict(
            clip_pre_norm=pre,
            clip_post_norm=post,
            clip_scale=scale,
            clip_fraction=fraction,
        )

    def _record_histograms(self, step: tf.Tensor, grads: dict[int, Any]) -> None:
        measurement = histogram_measurement(
            grads, self._weights(), len(self.variables), self.layout.buckets
        )
        self.state.record_histograms(step, measurement)

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
        counts, ranges, n = np.asarray(counts), np.asarray(ranges), len(self.paths)
        weights = self.layout.weights
        return HistogramSnapshot(
            step=int(step),
            paths=tuple(self.paths),
            grad_counts=counts[:n],
            grad_range=ranges[:n, :2],
            weight_counts=counts[n:] if weights else None,
            weight_range=ranges[n:, :2] if weights else None,
            has_grad=ranges[:n, 2] > 0,
        )

    def scalar_values(self, step: Any, values: Any) -> Snapshot:
        """A `Snapshot` of captured `(step, values)`."""
        return Snapshot(
            int(step),
            tuple(self.paths),
            tuple(self.group_members),
            np.asarray(values),
            self.layout,
        )


__all__ = ["ClipOutcome", "Due", "GradientMonitor", "Processed"]
