"""What the monitor does on every step, due or not: clip, take the norm in
for the every-step signals, and decide whether the step is applied
(`GradientMonitor` inherits it; see `keras_gradmon.monitor`).

Example:

>>> outcome = monitor.clip(grads, indices)        # doctest: +SKIP
>>> applied, gate = monitor.decide(step, outcome)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from keras import ops

from keras_gradmon.clipping import as_gradient, global_norm_of
from keras_gradmon.measurement import ClipOutcome
from keras_gradmon.state import VariableStore


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
        counts = values["clip_counts"]
        step_counts = ops.cast(ops.stack([1, clipped]), counts.dtype)
        new["clip_counts"] = counts + step_counts
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
        skipped = store.read()["skipped_steps"]
        missed = ops.cast(ops.logical_not(applied), skipped.dtype)
        store.write({"skipped_steps": skipped + missed})

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
