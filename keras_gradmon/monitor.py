"""`GradientMonitor`: the part of the wrapper that runs inside the train step.

It is framework-neutral: the Keras 3 wrapper (`optimizer.py`) and the tf_keras
wrapper give it the gradients, the index of each gradient's variable, the step,
and a function that creates variables. All it adds to the step is a graph
conditional per frequency; the statistics are computed only in the taken
branch and stored in `MonitorState` variables.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from keras_gradmon import distribute
from keras_gradmon.config import Frequency, MonitorConfig
from keras_gradmon.state import (
    HistogramSnapshot,
    MonitorState,
    Snapshot,
    VariableFactory,
)
from keras_gradmon.stats import STATISTICS, bucket_counts, combine_norms
from keras_gradmon.stats.moments import stack_statistics


def variable_path(variable: Any) -> str:
    """The path of a Keras 3 variable, or a tf.Variable's name without `:0`."""
    path = getattr(variable, "path", None)
    if isinstance(path, str) and path:
        return path
    name = variable.name
    return name[:-2] if name.endswith(":0") else name


def unique_paths(variables: Sequence[Any]) -> list[str]:
    """Variable paths, made unique with a `_1`, `_2` ... suffix if repeated."""
    return unique_names([variable_path(v) for v in variables])


def unique_names(names: Sequence[str]) -> list[str]:
    """`names`, made unique with a `_1`, `_2` ... suffix if repeated.

    Example:

    >>> unique_names(["dense", "dense", "head"])
    ['dense', 'dense_1', 'head']
    """
    seen: dict[str, int] = {}
    paths = []
    for path in names:
        if path in seen:
            seen[path] += 1
            path = f"{path}_{seen[path]}"
        else:
            seen[path] = 0
        paths.append(path)
    return paths


def match_groups(groups: dict[str, str], paths: Sequence[str]) -> dict[str, list[int]]:
    """Indices of the variables in each group; a group matching none is an error."""
    members = {}
    for name, pattern in groups.items():
        regex = re.compile(pattern)
        members[name] = [i for i, path in enumerate(paths) if regex.search(path)]
        if not members[name]:
            raise ValueError(
                f"Group {name!r} of `groups` matches no variable: "
                f"groups[{name!r}]={pattern!r}. Variable paths: {list(paths)}"
            )
    return members


def in_xla_context() -> bool:
    """Whether ops are being traced into an XLA-compiled function."""
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - private module moved
        return False
    graph = tf.compat.v1.get_default_graph()
    return bool(control_flow_util.GraphOrParentsInXlaContext(graph))


def gate(
    pred: tf.Tensor,
    true_fn: Callable[[], tf.Tensor],
    false_fn: Callable[[], tf.Tensor],
) -> tf.Tensor:
    """`tf.cond` whose untaken branch costs nothing in a (non-XLA) graph.

    In a `tf.function` without XLA, TensorFlow lowers `tf.cond` to
    Switch/Merge, and the executor then visits every op of the untaken
    branch on every step (dead tensors flow through them): with the
    statistics of every variable in the branch, that measured 0.2 ms a step.
    Kept as a functional conditional, only the taken branch runs. Under XLA
    and eagerly, plain `tf.cond` already behaves so.
    """
    if tf.executing_eagerly() or in_xla_context():
        return tf.cond(pred, true_fn, false_fn)
    try:
        from tensorflow.python.ops import cond_v2
    except ImportError:  # pragma: no cover - private module moved
        return tf.cond(pred, true_fn, false_fn)
    return cond_v2.indexed_case(
        tf.cast(pred, tf.int32), [false_fn, true_fn], lower_using_switch_merge=False
    )


def should_record(frequency: Frequency, step: tf.Tensor) -> tf.Tensor:
    """The boolean tensor that gates a summary at `step`."""
    if callable(frequency):
        return tf.reshape(tf.cast(frequency(step), tf.bool), [])
    return tf.equal(tf.math.floormod(step, frequency), 0)


class GradientMonitor:
    """Computes and stores gradient statistics inside the train step.

    Args:
        config: The monitor's options.

    Example:

    >>> monitor = GradientMonitor(MonitorConfig(every_n_steps=1))
    >>> v = tf.Variable([1.0, 2.0], name="w")
    >>> monitor.build([v], make_tf_variable)
    >>> monitor.record(tf.constant(0, tf.int64), [tf.constant([3.0, 4.0])], [0])
    >>> monitor.snapshot().totals["grad_norm"]
    5.0
    """

    def __init__(self, config: MonitorConfig) -> None:
        self.config = config
        self.built = False

    def build(self, variables: Sequence[Any], make_variable: VariableFactory) -> None:
        """Creates the state for `variables` (in the optimizer's order)."""
        self.variables = list(variables)
        self.paths = unique_paths(self.variables)
        self.group_members = match_groups(self.config.groups, self.paths)
        histograms = self.config.histogram_every_n_steps is not None
        self.clip_rule = self.config.clip_rule
        self.state = MonitorState(
            make_variable,
            num_variables=len(self.variables),
            num_groups=len(self.group_members),
            buckets=self.config.histogram_buckets if histograms else None,
            weights=self.config.weight_statistics,
            clip_spec=self.clip_rule.state_spec() if self.clip_rule else None,
        )
        self.built = True

    # Inside the step ---------------------------------------------------------

    def record(
        self,
        step: tf.Tensor,
        grads: Sequence[tf.Tensor | None],
        indices: Sequence[int],
        after: Callable[[str], None] | None = None,
        applied: Callable[[list[tf.Tensor | None]], tf.Tensor] | None = None,
        loss_scale: tf.Tensor | None = None,
    ) -> tuple[list[tf.Tensor | None], tf.Tensor]:
        """Records statistics of `grads` on summary steps, and clips them.

        Args:
            step: The integer step (any int dtype) the gradients belong to.
            grads: Gradients, None for a variable without one.
            indices: The index (in the built variable order) of each
                gradient's variable.
            after: Called with "scalars" or "histograms" inside the branch
                that just recorded them (to add summary ops there, the
                tf-agents way), so that writing costs no conditional of
                its own.
            applied: For an inner optimizer that decides itself whether to
                apply a step (a `LossScaleOptimizer` skips non-finite ones):
                given the gradients this returns, whether the step will be
                applied. A rejected step counts in `skipped_steps` and
                records no statistics (its step number comes again).
            loss_scale: The loss scale `grads` were unscaled by, recorded
                with the statistics.

        Returns:
            `(grads to apply, finite)`: the gradients after the configured
            clipping (None where the input was None) and whether the step
            is to be applied: `applied`'s verdict if given, else whether
            every gradient was finite (always True when neither clipping
            nor `skip_nonfinite` is configured: nothing is computed for it).
        """
        step = tf.cast(step, tf.int64)
        by_index = {i: g for g, i in zip(grads, indices) if g is not None}
        clipping = self._clip(by_index) if self._needs_global_norm(applied) else None
        out, finite = list(grads), tf.constant(True)
        if clipping is not None:
            clipped = clipping["grads"]
            out = [None if g is None else clipped[i] for g, i in zip(grads, indices)]
            finite = tf.math.is_finite(clipping["pre_norm"])
        verdict = None if applied is None else applied(out)
        if verdict is not None:
            finite = verdict
        if self.config.skip_nonfinite or verdict is not None:
            # Counted before the statistics, so a summary of this very step
            # already shows it; the wrapper (or the inner optimizer) skips.
            self.state.skipped.assign_add(tf.cast(tf.logical_not(finite), tf.int64))
        after = after or (lambda kind: None)

        def statistics() -> None:
            self._record_statistics(step, by_index, clipping, loss_scale)
            after("scalars")

        def histograms() -> None:
            self._record_histograms(step, by_index)
            after("histograms")

        parts = [(self.config.every_n_steps, statistics)]
        if self.state.hist_step is not None:
            parts.append((self.config.histogram_every_n_steps, histograms))
        self._gated(parts, step, verdict)
        return out, finite

    def _needs_global_norm(self, applied: Callable | None) -> bool:
        # With `applied`, the inner optimizer's own test decides the skips.
        skip_by_norm = self.config.skip_nonfinite and applied is None
        return self.clip_rule is not None or skip_by_norm

    def _clip(self, grads: dict[int, tf.Tensor]) -> dict[str, Any]:
        """Clips `grads` (every step) and counts the clipped steps."""
        order = sorted(grads)
        dense = [tf.convert_to_tensor(grads[i]) for i in order]
        # The same global norm as tf.clip_by_global_norm (NaN if any NaN).
        pre_norm = tf.cast(tf.linalg.global_norm(dense), tf.float32)
        rule = self.clip_rule
        if rule is None:
            return {
                "grads": dict(zip(order, dense)),
                "pre_norm": pre_norm,
                "post_norm": pre_norm,
            }
        weights = [tf.convert_to_tensor(self.variables[i]) for i in order]
        state = {k: tf.convert_to_tensor(v) for k, v in self.state.clip.items()}
        clipped, new_state = rule.clip(dense, weights, pre_norm, state)
        for name, value in new_state.items():
            self.state.clip[name].assign(value)
        if rule.name == "global_norm":
            # Known without another pass over the gradients (NaN stays NaN).
            post_norm = tf.minimum(pre_norm, rule.max_norm)
        else:
            post_norm = tf.cast(tf.linalg.global_norm(clipped), tf.float32)
        was_clipped = tf.cast(post_norm < pre_norm, tf.int64)
        self.state.clip_counts.assign_add(
            tf.stack([tf.constant(1, tf.int64), was_clipped])
        )
        return {
            "grads": dict(zip(order, clipped)),
            "pre_norm": pre_norm,
            "post_norm": post_norm,
        }

    @staticmethod
    def _gated(
        parts: list[tuple[Frequency, Callable[[], None]]],
        step: tf.Tensor,
        allowed: tf.Tensor | None = None,
    ) -> None:
        """Runs each `(frequency, fn)` on its summary steps (and only where
        `allowed` holds, if given).

        A step that is no summary step of any part runs a single graph
        conditional (one, not one per part): the per-part conditionals sit
        inside its taken branch.
        """
        if allowed is not None:
            # One conditional on steps that are skipped or not due.
            if any(frequency != 1 for frequency, _ in parts):
                due = [should_record(frequency, step) for frequency, _ in parts]
                allowed = tf.logical_and(allowed, tf.reduce_any(tf.stack(due)))

            def taken() -> tf.Tensor:
                GradientMonitor._gated(parts, step)
                return tf.constant(True)

            gate(allowed, taken, lambda: tf.constant(False))
            return
        always = [fn for frequency, fn in parts if frequency == 1]
        gated = [(frequency, fn) for frequency, fn in parts if frequency != 1]
        for fn in always:
            fn()
        if not gated:
            return
        gates = [should_record(frequency, step) for frequency, _ in gated]

        def false() -> tf.Tensor:
            return tf.constant(False)

        def run(fn: Callable[[], None]) -> Callable[[], tf.Tensor]:
            def taken() -> tf.Tensor:
                fn()
                return tf.constant(True)

            return taken

        if len(gated) == 1:
            gate(gates[0], run(gated[0][1]), false)
            return

        def any_taken() -> tf.Tensor:
            for due, (_, fn) in zip(gates, gated):
                gate(due, run(fn), false)
            return tf.constant(True)

        gate(tf.reduce_any(tf.stack(gates)), any_taken, false)

    def _statistics_matrix(self, tensors: dict[int, tf.Tensor]) -> tf.Tensor:
        missing = tf.concat(
            [tf.fill([len(STATISTICS)], float("nan")), tf.zeros([1])], 0
        )
        # The norm feeds group and global norms, the non-finite count the
        # totals: both are always computed; the rest only when configured.
        names = sorted({"norm", "nonfinite", *self.config.statistics})
        rows = [
            tf.concat([stack_statistics(tensors[i], names), tf.ones([1])], 0)
            if i in tensors
            else missing
            for i in range(len(self.variables))
        ]
        return tf.stack(rows)

    def _norms(self, matrix: tf.Tensor, present: Sequence[int]) -> tuple[Any, Any]:
        norm_column = matrix[:, STATISTICS.index("norm")]
        total = combine_norms(tf.gather(norm_column, list(present)))
        groups = [
            combine_norms(tf.gather(norm_column, [i for i in members if i in present]))
            for members in self.group_members.values()
        ]
        return total, groups

    def _record_statistics(
        self,
        step: tf.Tensor,
        grads: dict[int, tf.Tensor],
        clipping: dict[str, Any] | None,
        loss_scale: tf.Tensor | None = None,
    ) -> None:
        state = self.state
        present = sorted(grads)
        grad_matrix = self._statistics_matrix(grads)
        grad_total, grad_groups = self._norms(grad_matrix, present)
        weight_total = tf.constant(0.0)
        weight_groups = [tf.constant(0.0)] * len(grad_groups)
        if state.weight is not None:
            weights = {i: tf.convert_to_tensor(v) for i, v in enumerate(self.variables)}
            weight_matrix = self._statistics_matrix(weights)
            weight_total, weight_groups = self._norms(
                weight_matrix, range(len(self.variables))
            )
            state.weight.assign(weight_matrix)
        nonfinite = tf.reduce_sum(
            tf.gather(grad_matrix[:, STATISTICS.index("nonfinite")], present)
        )
        state.grad.assign(grad_matrix)
        if grad_groups:
            state.groups.assign(
                tf.stack([tf.stack(grad_groups), tf.stack(weight_groups)], axis=1)
            )
        missing = float(len(self.variables) - len(present))
        nan = tf.constant(float("nan"))
        pre_norm = post_norm = fraction = nan
        if clipping is not None:
            pre_norm, post_norm = clipping["pre_norm"], clipping["post_norm"]
        if self.clip_rule is not None:
            counts = tf.cast(state.clip_counts, tf.float32)
            fraction = counts[1] / tf.maximum(counts[0], 1.0)
            state.clip_counts.assign(tf.zeros([2], tf.int64))
        skipped = tf.cast(state.skipped, tf.float32)
        scale = nan if loss_scale is None else tf.cast(loss_scale, tf.float32)
        state.totals.assign(
            tf.stack(
                [
                    grad_total,
                    weight_total,
                    nonfinite,
                    tf.constant(missing),
                    pre_norm,
                    post_norm,
                    fraction,
                    skipped,
                    scale,
                ]
            )
        )
        state.stats_step.assign(step)

    def _histogram_matrices(self, tensors: dict[int, tf.Tensor]) -> tuple[Any, Any]:
        buckets = self.config.histogram_buckets
        counts, ranges = [], []
        for i in range(len(self.variables)):
            if i in tensors:
                c, r = bucket_counts(tensors[i], buckets)
                counts.append(c)
                ranges.append(tf.concat([r, tf.ones([1])], 0))
            else:
                counts.append(tf.zeros([buckets], tf.int32))
                ranges.append(tf.zeros([3]))
        return tf.stack(counts), tf.stack(ranges)

    def _record_histograms(self, step: tf.Tensor, grads: dict[int, tf.Tensor]) -> None:
        state = self.state
        counts, ranges = self._histogram_matrices(grads)
        state.grad_counts.assign(counts)
        state.grad_range.assign(ranges)
        if state.weight_counts is not None:
            weights = {i: tf.convert_to_tensor(v) for i, v in enumerate(self.variables)}
            counts, ranges = self._histogram_matrices(weights)
            state.weight_counts.assign(counts)
            state.weight_range.assign(ranges[:, :2])
        state.hist_step.assign(step)

    # Host side -----------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The latest scalar statistics as NumPy data (a host read)."""
        return self.state.snapshot(self.paths, list(self.group_members))

    def histogram_snapshot(self) -> HistogramSnapshot | None:
        """The latest histograms as NumPy data, or None if histograms are off."""
        return self.state.histogram_snapshot(self.paths)


class MonitoredOptimizer:
    """What both optimizer wrappers (Keras 3, tf_keras) offer to read back
    what their `monitor` recorded."""

    monitor: GradientMonitor
    name: str

    def snapshot(self) -> Snapshot:
        """The latest recorded scalar statistics, as NumPy data.

        Example:

        >>> optimizer.snapshot().totals["grad_norm"]  # doctest: +SKIP
        0.8123
        """
        self._check_monitor_built()
        return self.monitor.snapshot()

    def histogram_snapshot(self) -> HistogramSnapshot | None:
        """The latest recorded histograms, or None if histograms are off."""
        self._check_monitor_built()
        return self.monitor.histogram_snapshot()

    def _check_monitor_built(self) -> None:
        if not self.monitor.built:
            raise ValueError(
                f"{type(self).__name__} {self.name!r} has recorded nothing yet: "
                "it is built on the first train step (or by "
                "`optimizer.build(variables)`)."
            )


def make_tf_variable(
    name: str, shape: tuple, dtype: str, initial: float
) -> tf.Variable:
    """A `VariableFactory` that makes non-trainable `tf.Variable`s, one copy
    per replica under a strategy (see `keras_gradmon.distribute`)."""
    return tf.Variable(
        tf.fill(shape, tf.cast(initial, dtype)),
        trainable=False,
        name=name,
        synchronization=distribute.SYNCHRONIZATION,
        aggregation=distribute.AGGREGATION,
    )
