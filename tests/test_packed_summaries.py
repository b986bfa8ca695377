"""Summaries packed into one op (`recorders.packed`) read back exactly as
`tf.summary.write` writes them: same tags, plugin, dtype, shape and bytes."""

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.compat.proto import types_pb2
from tensorboard.plugins.histogram import metadata as histogram_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata

from keras_gradmon.histogram_rows import histogram_rows
from keras_gradmon.legacy import graph_writer as packed
from keras_gradmon.legacy.graph_writer import batched_histogram_rows_graph

SCALARS = {
    "grad_norm/global": 1.5,
    "grad_norm/dense/kernel": 3e38,
    "weight_std/dense/bias": 1e-40,  # subnormal
    "grad_to_weight/dense/bias": float("nan"),  # optional: left out
    "clip/scale": -0.0,
    "grad_max/x": float("inf"),
}
OPTIONAL = {"grad_to_weight/dense/bias"}


def _values(path) -> dict:
    out = {}
    for file in sorted(path.iterdir()):
        loader = event_file_loader.EventFileLoader(str(file))
        for event in loader.Load():
            for value in event.summary.value:
                out[(value.tag, event.step)] = value
    return out


def _write_packed(path, step):
    writer = tf.summary.create_file_writer(str(path))
    tags = list(SCALARS)
    meta = scalar_metadata.create_summary_metadata("", "")
    head = packed.tensor_head(types_pb2.DT_FLOAT, [], 4)
    heads = [packed.value_head(t, meta, head, 4) for t in tags]
    counts = tf.constant([[1, 0, 3], [0, 0, 0]], tf.int32)
    ranges = tf.constant([[-1.0, 2.0], [np.inf, np.nan]], tf.float32)
    hmeta = histogram_metadata.create_summary_metadata("", "")
    hhead = packed.tensor_head(types_pb2.DT_DOUBLE, [3, 3], 72)
    hheads = [packed.value_head(t, hmeta, hhead, 72) for t in ("h/a", "h/b")]

    @tf.function(autograph=False)
    def write(values):
        keep = tf.logical_or(
            tf.constant([t not in OPTIONAL for t in tags]), tf.math.is_finite(values)
        )
        with writer.as_default():
            summary = packed.packed_summary(heads, values, keep)
            packed.write_packed(writer, tf.constant(step, tf.int64), summary)
            rows = batched_histogram_rows_graph(counts, ranges)
            hist = packed.packed_summary(hheads, rows)
            packed.write_packed(writer, tf.constant(step, tf.int64), hist)

    write(tf.constant(list(SCALARS.values()), tf.float32))
    writer.close()
    return counts, ranges


def _write_reference(path, step, counts, ranges):
    writer = tf.summary.create_file_writer(str(path))
    with writer.as_default():
        for tag, value in SCALARS.items():
            if tag in OPTIONAL and not np.isfinite(value):
                continue
            # A NumPy value: TensorFlow's cache of Python-float constants
            # would hand back 0.0 for -0.0 once a test made 0.0.
            data = tf.constant(np.array(value, np.float32))
            tf.summary.scalar(tag, data, step=step)
        for i, tag in enumerate(("h/a", "h/b")):
            meta = histogram_metadata.create_summary_metadata("", "")
            rows = tf.constant(histogram_rows(counts[i].numpy(), ranges[i].numpy()))
            tf.summary.write(tag, rows, step=step, metadata=meta)
    writer.close()


def test_packed_summaries_equal_tf_summary(tmp_path):
    counts, ranges = _write_packed(tmp_path / "packed", 7)
    _write_reference(tmp_path / "reference", 7, counts, ranges)
    ours, theirs = _values(tmp_path / "packed"), _values(tmp_path / "reference")
    assert sorted(ours) == sorted(theirs)
    assert ("grad_to_weight/dense/bias", 7) not in ours
    for key, value in theirs.items():
        mine = ours[key]
        assert mine.tensor.SerializeToString() == value.tensor.SerializeToString(), key
        assert mine.metadata.plugin_data.plugin_name == (
            value.metadata.plugin_data.plugin_name
        )


@pytest.mark.parametrize("n", [1, 2, 200])
def test_varint_lengths_of_long_summaries(tmp_path, n):
    # Heads and values past 127 and 16383 bytes need multi-byte lengths.
    tags = [f"grad_norm/{'v' * 150}/{i}" for i in range(n)]
    meta = scalar_metadata.create_summary_metadata("", "")
    head = packed.tensor_head(types_pb2.DT_FLOAT, [], 4)
    heads = [packed.value_head(t, meta, head, 4) for t in tags]
    values = np.arange(n, dtype=np.float32) * 0.5
    summary = packed.packed_summary(heads, tf.constant(values))
    writer = tf.summary.create_file_writer(str(tmp_path))
    packed.write_packed(writer, tf.constant(0, tf.int64), summary)
    writer.close()
    read = _values(tmp_path)
    for i, tag in enumerate(tags):
        assert tf.make_ndarray(read[(tag, 0)].tensor) == values[i]
