"""Real event files for the report's tests: `tf.summary` (tensor scalars, as
TensorFlow 2 and tf-agents write them) and TensorBoard's `EventFileWriter`
(legacy `simple_value` scalars, as TF1 and `tf.compat.v1.summary` wrote
them)."""

from __future__ import annotations

import os

#: `{tag: {step: value}}`
Series = dict[str, dict[int, float]]


def write_tensor_scalars(log_dir: str, series: Series) -> None:
    """Writes every value with `tf.summary.scalar` (a tensor summary with the
    scalars plugin's metadata)."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(log_dir)
    with writer.as_default():
        for name, points in series.items():
            for step, value in sorted(points.items()):
                tf.summary.scalar(name, value, step=step)
    writer.close()


def write_tf_agents_losses(
    log_dir: str, losses: Series, name_scope: str = "Losses/"
) -> None:
    """Writes the losses as tf-agents' agents do: inside a `tf.function`,
    `tf.compat.v2.summary.scalar(name=<loss>, ...)` under
    `tf.name_scope('Losses/')` (SAC: `'Losses'`), at the train step counter."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(log_dir)
    counter = tf.Variable(0, dtype=tf.int64)
    names = sorted(losses)
    steps = sorted({step for points in losses.values() for step in points})

    @tf.function
    def summarize(values: tf.Tensor, present: tf.Tensor) -> None:
        with tf.name_scope(name_scope):
            for i, name in enumerate(names):
                with tf.summary.record_if(present[i]):
                    tf.compat.v2.summary.scalar(name=name, data=values[i], step=counter)

    with writer.as_default():
        for step in steps:
            counter.assign(step)
            present = [step in losses[name] for name in names]
            values = [losses[name].get(step, 0.0) for name in names]
            summarize(tf.constant(values, tf.float32), tf.constant(present))
    writer.close()


def write_simple_values(log_dir: str, series: Series) -> None:
    """Writes every value as a legacy `Summary.Value.simple_value` with
    TensorBoard's own `EventFileWriter` (no TensorFlow)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    os.makedirs(log_dir, exist_ok=True)
    writer = EventFileWriter(log_dir)
    steps = sorted({step for points in series.values() for step in points})
    for step in steps:
        values = [
            summary_pb2.Summary.Value(tag=name, simple_value=points[step])
            for name, points in series.items()
            if step in points
        ]
        summary = summary_pb2.Summary(value=values)
        writer.add_event(event_pb2.Event(step=step, summary=summary))
    writer.close()


def norms(steps: range, scope: str | None = None) -> Series:
    """A monitored optimizer's global gradient norm: 1, 2, ... at `steps`."""
    name = f"grad_norm/{scope}/global" if scope else "grad_norm/global"
    return {name: {step: float(i + 1) for i, step in enumerate(steps)}}
