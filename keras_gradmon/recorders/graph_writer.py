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
from tensorboard.plugins.histogram import metadata as histogram_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata

from keras_gradmon.graph import in_xla_context, run_if
from keras_gradmon.measurement import Due
from keras_gradmon.monitor import GradientMonitor
from keras_gradmon.recorders import claims
from keras_gradmon.recorders.buckets import histogram_rows_graph


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
).SerializeToString()


def _write(tag: str, value: tf.Tensor, step: tf.Tensor, metadata: bytes) -> None:
    """`tf.summary.write` without its own conditional: the callers test the
    recording condition once (`tf.summary.write` builds a `tf.cond` per
    summary, evaluating `should_record_summaries()` each time: 10 ms of
    tracing and a Switch/Merge per summary at every step)."""
    from tensorflow.python.ops import gen_summary_ops

    with tf.device("cpu:0"):
        gen_summary_ops.write_summary(
            default_writer()._resource, step, tf.identity(value), tag, metadata
        )


def write_scalar(name: str, value: tf.Tensor, step: tf.Tensor) -> None:
    """`tf.summary.scalar` under exactly the tag `name` (no name scope prefix)."""
    _write(name, tf.cast(value, tf.float32), step, _SCALAR_METADATA)


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
    flat = monitor.state.latest_values()
    for entry in monitor.tags.graph_scalars(present):
        value = flat[entry.index]
        if entry.optional:  # written only while finite, as on the host

            def write(name: str = entry.tag, value: tf.Tensor = value) -> None:
                write_scalar(name, value, step)

            run_if(tf.math.is_finite(value), write)
        else:
            write_scalar(entry.tag, value, step)


def _write_histograms(monitor: GradientMonitor, step: tf.Tensor, present: set) -> None:
    metadata = histogram_metadata.create_summary_metadata(
        display_name="", description=""
    ).SerializeToString()
    counts, ranges = monitor.state.latest_histograms()
    rows = len(monitor.paths)
    for entry in monitor.tags.histograms:
        if entry.kind == "grad" and entry.row not in present:
            continue
        row = entry.row + (rows if entry.kind == "weight" else 0)
        _write(
            entry.tag,
            histogram_rows_graph(counts[row], ranges[row, :2]),
            step,
            metadata,
        )
