"""Writes a monitor's statistics from inside the train step (`tf.summary` ops).

The tf-agents way: the train step runs under `with writer.as_default():` and
writes its own summaries. The tags come from the monitor's tag table, known
when the step is traced; the values are gathered from the monitor's state
variables at the table's indices, so a summary shows exactly what
`snapshot()` reads on the host.
"""

from __future__ import annotations

from collections.abc import Collection

import tensorflow as tf
from tensorboard.compat.proto import types_pb2
from tensorboard.plugins.histogram import metadata as histogram_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata

from keras_gradmon.adapters import packed
from keras_gradmon.backend.tensorflow import in_xla_context, run_if
from keras_gradmon.core.histogram import batched_histogram_rows_graph
from keras_gradmon.core.measurement import Due
from keras_gradmon.core.monitor import GradientMonitor
from keras_gradmon.recorders import claims


def default_writer() -> object | None:
    """The default `tf.summary` writer set by `writer.as_default()`, if any."""
    try:
        from tensorflow.python.ops import summary_ops_v2
    except ImportError:  # pragma: no cover - private module moved
        return None
    return summary_ops_v2._summary_state.writer


def summaries_enabled() -> bool:
    """Whether a default `tf.summary` writer may record here (trace time):
    one is set, recording is not switched off, and this is not XLA (where
    summary ops do not compile)."""
    if default_writer() is None:
        return False
    if not tf.executing_eagerly() and in_xla_context():
        return False
    recording = tf.get_static_value(tf.summary.should_record_summaries())
    return recording is None or bool(recording)


_SCALAR_METADATA = scalar_metadata.create_summary_metadata(
    display_name="", description=""
)
_HISTOGRAM_METADATA = histogram_metadata.create_summary_metadata(
    display_name="", description=""
)


def _recording() -> tf.Tensor | bool:
    """The recording condition (`tf.summary.record_if`, a strategy's), to
    test once for all summaries: True when nothing restricts it (then
    `should_record_summaries()` is still a tensor, `logical_and(True, True)`,
    unknown when tracing)."""
    from tensorflow.python.ops import summary_ops_v2

    state = summary_ops_v2._summary_state
    if state.is_recording in (None, True) and (
        state.is_recording_distribution_strategy is True
    ):
        return True
    replica = tf.distribute.get_replica_context()
    if replica is not None and replica.num_replicas_in_sync > 1:
        # tf.summary records on the first replica only; another one (on its
        # own device) does not hold the writer.
        index = tf.get_static_value(replica.replica_id_in_sync_group)
        if index is not None and index != 0:
            return False
    return tf.summary.should_record_summaries()


def write_recorded(
    monitor: GradientMonitor,
    step: tf.Tensor,
    due: Due,
    present: Collection[int],
    label: str = "optimizer",
) -> None:
    """Writes what `monitor` recorded at `step`, where `due` says it did,
    under the default writer; nothing when summaries are not enabled.

    Args:
        monitor: A built `GradientMonitor`.
        step: The int64 step given to `monitor.measure`.
        due: What `monitor.measure` returned.
        present: The rows of the variables that had a gradient at this step
            (known at trace time); only they get `grad_*` tags.
        label: How a tag collision error, or the announcement of a scope
            derived for an unnamed monitor, names the optimizer.

    Example:

    ```python
    due = monitor.measure(step, grads, indices)
    with writer.as_default():
        write_recorded(monitor, step, due, present=set(indices))
    ```
    """
    if not summaries_enabled():
        return
    writer = default_writer()
    # At trace time, before the tags are read: an unnamed monitor beside
    # another one gets its derived scope here (see recorders.claims).
    claims.claim_monitor(monitor, [writer], label)
    step = tf.cast(step, tf.int64)
    present = set(present)
    recording = _recording()
    if recording is False:
        return
    for when, write in (
        (due.scalars, _write_scalars),
        (due.histograms, _write_histograms),
    ):
        if when is not False:
            run_if(
                when if recording is True else tf.logical_and(when, recording),
                lambda write=write: write(monitor, step, present),
            )


def _write_scalars(monitor: GradientMonitor, step: tf.Tensor, present: set) -> None:
    """Every scalar tag of the step in one write (`recorders.packed`); the
    optional ones only while finite, as on the host."""
    entries = monitor.tags.graph_scalars(present)
    if not entries:
        return
    tensor = packed.tensor_head(types_pb2.DT_FLOAT, [], 4)
    heads = [packed.value_head(e.tag, _SCALAR_METADATA, tensor, 4) for e in entries]
    values = tf.gather(monitor.state.latest_values(), [e.index for e in entries])
    optional = tf.constant([e.optional for e in entries])
    keep = tf.logical_or(tf.logical_not(optional), tf.math.is_finite(values))
    summary = packed.packed_summary(heads, values, keep)
    packed.write_packed(default_writer(), step, summary)


def _write_histograms(monitor: GradientMonitor, step: tf.Tensor, present: set) -> None:
    """Every histogram of the step (`[k, 3]` float64 rows) in one write."""
    rows, entries = len(monitor.paths), []
    for entry in monitor.tags.histograms:
        if entry.kind == "weight" or entry.row in present:
            entries.append((entry, entry.row + (rows if entry.kind == "weight" else 0)))
    if not entries:
        return
    counts, ranges = monitor.state.latest_histograms()
    picked = [row for _, row in entries]
    values = batched_histogram_rows_graph(
        tf.gather(counts, picked), tf.gather(ranges, picked)[:, :2]
    )
    k = int(values.shape[1])
    tensor = packed.tensor_head(types_pb2.DT_DOUBLE, [k, 3], 24 * k)
    heads = [
        packed.value_head(e.tag, _HISTOGRAM_METADATA, tensor, 24 * k)
        for e, _ in entries
    ]
    packed.write_packed(default_writer(), step, packed.packed_summary(heads, values))
