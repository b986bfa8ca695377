"""Writes a monitor's statistics from inside the train step (`tf.summary` ops).

The tf-agents way: the train step runs under `with writer.as_default():` and
writes its own summaries. The tags are the Python strings of
`keras_gradmon.tags`, known when the step is traced; the values are read from
the monitor's state variables, so the summary shows exactly what `snapshot()`
reads on the host.
"""

from __future__ import annotations

from collections.abc import Collection

import tensorflow as tf
from tensorboard.plugins.histogram import metadata as histogram_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata

from keras_gradmon.monitor import GradientMonitor, in_xla_context
from keras_gradmon.state import COLUMNS, GLOBAL_FIELDS
from keras_gradmon.tags import scalar_entries, tag


def summaries_enabled() -> bool:
    """Whether a default `tf.summary` writer may record here (trace time)."""
    if tf.executing_eagerly() is False and in_xla_context():
        return False
    recording = tf.get_static_value(tf.summary.should_record_summaries())
    return recording is None or bool(recording)


def write_scalar(name: str, value: tf.Tensor, step: tf.Tensor) -> None:
    """`tf.summary.scalar` under exactly the tag `name` (no name scope prefix)."""
    metadata = scalar_metadata.create_summary_metadata(display_name="", description="")
    tf.summary.write(name, tf.cast(value, tf.float32), step=step, metadata=metadata)


def histogram_buckets(counts: tf.Tensor, value_range: tf.Tensor) -> tf.Tensor:
    """The graph version of `tags.histogram_buckets`: `[k, 3]` float64 rows.

    Example:

    >>> histogram_buckets(tf.constant([1, 2]), tf.constant([0.0, 1.0])).numpy()
    array([[0. , 0.5, 1. ],
           [0.5, 1. , 2. ]])
    """
    k = int(counts.shape[0])
    value_range = tf.cast(value_range, tf.float64)
    finite = tf.reduce_all(tf.math.is_finite(value_range))
    value_range = tf.where(finite, value_range, tf.zeros_like(value_range))
    low, high = value_range[0], value_range[1]
    edges = low + (high - low) * tf.range(k + 1, dtype=tf.float64) / k
    edges = tf.concat([edges[:-1], [high]], 0)
    return tf.stack([edges[:-1], edges[1:], tf.cast(counts, tf.float64)], axis=1)


def write_recorded(
    monitor: GradientMonitor, kind: str, step: tf.Tensor, present: Collection[int]
) -> None:
    """Writes what `monitor` just recorded at `step`: "scalars" or "histograms".

    Meant as the `after` hook of `GradientMonitor.record`, which calls it
    inside the branch taken on summary steps, so writing adds no conditional
    of its own. Needs a default `tf.summary` writer.

    Args:
        monitor: A built `GradientMonitor`.
        kind: "scalars" or "histograms".
        step: The int64 step given to `monitor.record`.
        present: The indices of the variables that had a gradient at this
            step (known at trace time); only they get `grad_*` tags.

    Example:

    ```python
    with writer.as_default():
        grads, finite = monitor.record(
            step, grads, indices,
            after=lambda kind: write_recorded(monitor, kind, step, indices))
    ```
    """
    write = _write_scalars if kind == "scalars" else _write_histograms
    write(monitor, step, set(present))


def _write_scalars(monitor: GradientMonitor, step: tf.Tensor, present: set) -> None:
    state = monitor.state
    totals = tf.convert_to_tensor(state.totals)
    total = {name: totals[i] for i, name in enumerate(GLOBAL_FIELDS)}
    groups = tf.convert_to_tensor(state.groups)
    grad = tf.convert_to_tensor(state.grad)
    weight = tf.convert_to_tensor(state.weight) if state.weight is not None else None
    norm = COLUMNS.index("norm")
    entries = scalar_entries(
        monitor.config,
        monitor.paths,
        list(monitor.group_members),
        present,
        weight is not None,
    )
    for entry in entries:
        i, source = entry.row, entry.source
        if source == "total":
            value = total[entry.column]
        elif source == "clip_scale":
            pre, post = total["clip_pre_norm"], total["clip_post_norm"]
            value = tf.where(tf.equal(pre, 0.0), tf.constant(1.0), post / pre)
        elif source in ("group_grad", "group_weight"):
            value = groups[i, 0 if source == "group_grad" else 1]
        elif source == "ratio":
            _write_ratio(entry.tag, grad[i, norm], weight[i, norm], step)
            continue
        else:  # "grad" or "weight"
            matrix = grad if source == "grad" else weight
            value = matrix[i, COLUMNS.index(entry.column)]
        write_scalar(entry.tag, value, step)


def _write_ratio(
    name: str, grad_norm: tf.Tensor, weight_norm: tf.Tensor, step: tf.Tensor
) -> None:
    # Only while the weight norm is above 0, as on the host.
    def write() -> tf.Tensor:
        write_scalar(name, grad_norm / weight_norm, step)
        return tf.constant(True)

    tf.cond(weight_norm > 0, write, lambda: tf.constant(False))


def _write_histograms(monitor: GradientMonitor, step: tf.Tensor, present: set) -> None:
    config, state = monitor.config, monitor.state
    scope = config.tag_scope
    metadata = histogram_metadata.create_summary_metadata(
        display_name="", description=""
    )
    grad_counts = tf.convert_to_tensor(state.grad_counts)
    grad_range = tf.convert_to_tensor(state.grad_range)
    weight_counts = weight_range = None
    if state.weight_counts is not None:
        weight_counts = tf.convert_to_tensor(state.weight_counts)
        weight_range = tf.convert_to_tensor(state.weight_range)
    for i, path in enumerate(monitor.paths):
        if i in present:
            tf.summary.write(
                tag("grad_hist", path, scope),
                histogram_buckets(grad_counts[i], grad_range[i, :2]),
                step=step,
                metadata=metadata,
            )
        if weight_counts is not None:
            tf.summary.write(
                tag("weight_hist", path, scope),
                histogram_buckets(weight_counts[i], weight_range[i]),
                step=step,
                metadata=metadata,
            )
