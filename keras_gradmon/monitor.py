"""`GradientMonitor`: the part of the wrapper that runs inside the train step.

It is framework-neutral: the Keras 3 wrapper (`optimizer.py`) and the tf_keras
wrapper give it the gradients, the index of each gradient's variable, the step,
and a function that creates variables. All it adds to the step is a graph
conditional per frequency; the statistics are computed only in the taken
branch and stored in `MonitorState` variables.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

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
    seen: dict[str, int] = {}
    paths = []
    for variable in variables:
        path = variable_path(variable)
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
        self.state = MonitorState(
            make_variable,
            num_variables=len(self.variables),
            num_groups=len(self.group_members),
            buckets=self.config.histogram_buckets if histograms else None,
            weights=self.config.weight_statistics,
        )
        self.built = True

    # Inside the step ---------------------------------------------------------

    def record(
        self,
        step: tf.Tensor,
        grads: Sequence[tf.Tensor | None],
        indices: Sequence[int],
    ) -> None:
        """Records statistics of `grads` if `step` is a summary step.

        Args:
            step: The integer step (any int dtype) the gradients belong to.
            grads: Gradients, None for a variable without one.
            indices: The index (in the built variable order) of each
                gradient's variable.
        """
        step = tf.cast(step, tf.int64)
        by_index = {i: g for g, i in zip(grads, indices) if g is not None}
        self._gated(
            self.config.every_n_steps,
            step,
            lambda: self._record_statistics(step, by_index),
        )
        if self.state.hist_step is not None:
            self._gated(
                self.config.histogram_every_n_steps,
                step,
                lambda: self._record_histograms(step, by_index),
            )

    @staticmethod
    def _gated(frequency: Frequency, step: tf.Tensor, fn: Any) -> None:
        if frequency == 1:
            fn()
            return

        def taken() -> tf.Tensor:
            fn()
            return tf.constant(True)

        tf.cond(should_record(frequency, step), taken, lambda: tf.constant(False))

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

    def _record_statistics(self, step: tf.Tensor, grads: dict[int, tf.Tensor]) -> None:
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
        state.totals.assign(
            tf.stack([grad_total, weight_total, nonfinite, tf.constant(missing)])
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


def make_tf_variable(
    name: str, shape: tuple, dtype: str, initial: float
) -> tf.Variable:
    """A `VariableFactory` that makes plain, non-trainable `tf.Variable`s."""
    return tf.Variable(
        tf.fill(shape, tf.cast(initial, dtype)),
        trainable=False,
        name=name,
        aggregation=tf.VariableAggregation.NONE,
    )
