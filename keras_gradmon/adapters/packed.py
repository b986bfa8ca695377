"""Many summaries written by one op: a `Summary` protocol buffer serialized
inside the graph.

Every part of a summary's encoding is known when the step is traced (tag,
plugin metadata, dtype, shape, the byte length of the value) except the
value's own bytes. Each summary is therefore a static head followed by its
value's raw bytes, which one `serialize_tensor` of all the values holds at
known offsets: a step writes a hundred summaries with a handful of ops
(`write_raw_proto_summary`) instead of an op and a conditional each. What
TensorBoard reads is what `tf.summary.write` would have written: the same
tag, metadata and tensor (dtype, shape, little-endian `tensor_content`).
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf
from tensorboard.compat.proto import (
    summary_pb2,
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)

#: `Summary.value` (field 1) and `Summary.Value.tensor` (field 8), both
#: length-delimited: their protobuf keys.
_VALUE_KEY, _TENSOR_KEY = b"\x0a", b"\x42"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tensor_head(dtype: int, shape: Sequence[int], size: int) -> bytes:
    """The encoding of a `TensorProto` of `dtype` and `shape` up to its
    `size` bytes of `tensor_content`.

    Example:

    >>> tensor_head(types_pb2.DT_FLOAT, [], 4)
    b'\\x08\\x01\\x12\\x00"\\x04'
    """
    dims = [tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in shape]
    proto = tensor_pb2.TensorProto(
        dtype=dtype,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=dims),
        tensor_content=b"\0" * size,
    )
    return proto.SerializeToString()[:-size]


def value_head(
    tag: str, metadata: summary_pb2.SummaryMetadata, tensor: bytes, size: int
) -> bytes:
    """The encoding of one `Summary.value` entry up to its value's `size`
    raw bytes: tag, metadata and the head of its tensor (`tensor_head`)."""
    value = summary_pb2.Summary.Value(tag=tag, metadata=metadata).SerializeToString()
    inner = value + _TENSOR_KEY + _varint(len(tensor) + size) + tensor
    return _VALUE_KEY + _varint(len(inner) + size) + inner


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


__all__ = ["packed_summary", "tensor_head", "types_pb2", "value_head", "write_packed"]
