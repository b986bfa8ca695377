"""Writes a monitor's statistics from inside the train step, the tf-agents
way: the step runs under `with writer.as_default():` and writes its own
summaries, many with one op (a `Summary` protocol buffer serialized inside
the graph), TensorBoard's histogram rows computed there.

Every part of a summary's encoding is known when the step is traced (tag,
plugin metadata, dtype, shape, the byte length of the value) except the
value's own bytes. Each summary is therefore a static head followed by its
value's raw bytes, which one `serialize_tensor` of all the values holds at
known offsets: a step writes a hundred summaries with a handful of ops
(`write_raw_proto_summary`) instead of an op and a conditional each. What
TensorBoard reads is what `tf.summary.write` would have written: the same
tag, metadata and tensor (dtype, shape, little-endian `tensor_content`).

The tags come from the monitor's tag table, known when the step is traced;
the values are gathered from the monitor's state variables at the table's
indices, so a summary shows exactly what `snapshot()` reads on the host.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tensorboard.compat.proto import types_pb2
from tensorboard.plugins.histogram import metadata as histogram_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata

from keras_gradmon import claims
from keras_gradmon.backend.tensorflow import in_xla_context, run_if
from keras_gradmon.core.measurement import Due
from keras_gradmon.core.monitor import GradientMonitor
from keras_gradmon.histogram_rows import ArrayOps, readable_rows
from keras_gradmon.recorders.tensorboard import (
    TensorBoardRecorder,
    table_head,
    table_metadata,
    tensor_head,
    value_head,
)


def packed_summary(
    heads: Sequence[bytes], values: tf.Tensor, keep: tf.Tensor | None = None
) -> tf.Tensor:
    """A serialized `Summary`: `heads[i]` followed by the raw bytes of
    `values[i]`, for each `i` where `keep` holds (all if None).

    Args:
        heads: The static heads (`value_head`), one per row of `values`.
        values: `[len(heads), ...]` values, of the dtype and row shape the
            heads announce.
        keep: Optional boolean `[len(heads)]`.

    Returns:
        A scalar string tensor.
    """
    n = len(heads)
    size = values.dtype.size * int(values.shape[1:].num_elements())
    raw = tf.io.serialize_tensor(values)  # tensor_content comes last
    start = tf.strings.length(raw) - n * size
    pieces = tf.strings.substr(
        tf.fill([n], raw), start + size * tf.range(n), tf.fill([n], size)
    )
    pieces = tf.strings.join([tf.constant(list(heads)), pieces])
    if keep is not None:
        pieces = tf.where(keep, pieces, "")
    return tf.strings.reduce_join(pieces)


def write_packed(writer: object, step: tf.Tensor, summary: tf.Tensor) -> None:
    """Writes a serialized `Summary` with the `tf.summary` writer `writer`
    (no recording condition of its own: the caller tests it)."""
    from tensorflow.python.ops import gen_summary_ops

    with tf.device("cpu:0"):
        gen_summary_ops.write_raw_proto_summary(writer._resource, step, summary)


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


def _announce(writer: Any, name: str, text: str) -> None:
    """Writes a derived scope's announcement through the `tf.summary`
    `writer`, at step 0, eagerly even while the step is traced."""
    with tf.init_scope():
        if tf.executing_eagerly():
            with tf.summary.record_if(True):
                TensorBoardRecorder(writer=writer).write_text(name, [text], 0)
            writer.flush()


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
    claims.claim_monitor(monitor, [writer], label, _announce)
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
    _write_table(monitor, step)
    entries = monitor.tags.graph_scalars(present)
    if not entries:
        return
    tensor = tensor_head(types_pb2.DT_FLOAT, [], 4)
    heads = [value_head(e.tag, _SCALAR_METADATA, tensor, 4) for e in entries]
    values = tf.gather(monitor.state.latest_values(), [e.index for e in entries])
    optional = tf.constant([e.optional for e in entries])
    keep = tf.logical_or(tf.logical_not(optional), tf.math.is_finite(values))
    summary = packed_summary(heads, values, keep)
    write_packed(default_writer(), step, summary)


def _write_table(monitor: GradientMonitor, step: tf.Tensor) -> None:
    """The per-variable numbers as one table (`columns.Table`), where the
    tag table holds them so: one `[rows, columns]` float32 tensor."""
    spec = monitor.tags.table
    if spec is None:
        return
    head = table_head(spec.names, table_metadata(spec.names))
    values = tf.gather(monitor.state.latest_values(), spec.index.reshape(1, -1))
    write_packed(default_writer(), step, packed_summary([head], values))


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
    tensor = tensor_head(types_pb2.DT_DOUBLE, [k, 3], 24 * k)
    heads = [
        value_head(e.tag, _HISTOGRAM_METADATA, tensor, 24 * k)
        for e, _ in entries
    ]
    write_packed(default_writer(), step, packed_summary(heads, values))


def batched_histogram_rows_graph(
    counts: tf.Tensor, value_ranges: tf.Tensor
) -> tf.Tensor:
    """`[n, k, 3]` float64 rows of `n` histograms at once, from `[n, k]`
    bucket counts and `[n, 2]` value ranges: `histogram_rows.readable_rows` in
    TensorFlow ops, so bit for bit the rows `histogram_rows.histogram_rows` makes
    on the host. Summaries are not written under XLA (`summaries_enabled`),
    so these ops run in a plain graph or eagerly.

    Example:

    >>> import tensorflow as tf
    >>> rows = batched_histogram_rows_graph(
    ...     tf.constant([[1, 2]]), tf.constant([[6.0, 1.8e31]]))
    >>> rows.numpy()[0, :, 1].tolist()
    [9e+30, 1.8e+31]
    """
    counts = tf.cast(counts, tf.float64)
    return readable_rows(counts, _as_float64(value_ranges), TENSORFLOW_OPS)


def _as_float64(x: tf.Tensor) -> tf.Tensor:
    """`x` in float64, its float32 subnormals kept: TensorFlow's CPU kernels
    read them as 0 (denormals are zero), where NumPy's cast keeps them.
    Their value in float64, a normal number, is the mantissa times 2**-149."""
    if x.dtype != tf.float32:
        return tf.cast(x, tf.float64)
    bits = tf.bitcast(x, tf.int32)
    mantissa = tf.cast(tf.bitwise.bitwise_and(bits, 0x7FFFFF), tf.float64)
    tiny = tf.where(bits < 0, -mantissa, mantissa) * 2.0**-149
    subnormal = tf.equal(tf.bitwise.bitwise_and(bits, 0x7F800000), 0)
    return tf.where(subnormal, tiny, tf.cast(x, tf.float64))


class _TensorFlowOps:
    """`columns.ArrayOps` of TensorFlow: float64 and int64 tensors."""

    floor, ceil = staticmethod(tf.math.floor), staticmethod(tf.math.ceil)
    rint = staticmethod(tf.math.round)  # half to even, as NumPy's rint
    abs, isfinite = staticmethod(tf.math.abs), staticmethod(tf.math.is_finite)
    maximum = staticmethod(tf.math.maximum)
    where, concat, stack = map(staticmethod, (tf.where, tf.concat, tf.stack))

    @staticmethod
    def all(x: tf.Tensor, axis: int) -> tf.Tensor:
        return tf.reduce_all(x, axis, keepdims=True)

    @staticmethod
    def sum(x: tf.Tensor, axis: int) -> tf.Tensor:
        x = tf.cast(x, tf.int64) if x.dtype == tf.bool else x
        return tf.reduce_sum(x, axis, keepdims=True)

    @staticmethod
    def take(table: np.ndarray, index: tf.Tensor) -> tf.Tensor:
        return tf.gather(tf.constant(table), index)

    @staticmethod
    def count_at_most(table: np.ndarray, x: tf.Tensor) -> tf.Tensor:
        # The raw op: `tf.searchsorted` adds a dozen shape ops around it.
        found = tf.raw_ops.UpperBound(
            sorted_inputs=table[None], values=tf.reshape(x, [1, -1]), out_type=tf.int64
        )
        return tf.reshape(found, tf.shape(x))

    @staticmethod
    def unstack(x: tf.Tensor, axis: int) -> list[tf.Tensor]:
        return tf.unstack(x, axis=axis)


#: `columns.ArrayOps` of TensorFlow.
TENSORFLOW_OPS: ArrayOps = _TensorFlowOps()
