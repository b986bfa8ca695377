"""`TensorBoardRecorder`: scalars, histograms and text in a TensorBoard event
file, with TensorBoard's own event-file writer and protocol buffers and
its TFRecord framing (a CRC-32C computed in C): writing to a log directory
never imports TensorFlow. `recording_hub` makes a hub that writes there.

TFRecord framing for event files, with a CRC-32C computed in C.

TensorBoard's own `RecordWriter` computes each record's masked CRC-32C in
Python, byte by byte (about 1 ms for a summary of a hundred tags), on the
writing thread and holding the interpreter lock; where TensorFlow is not
imported (Keras on JAX) nothing else writes the file. `google_crc32c`'s C
implementation makes it microseconds.

Example:

>>> import io
>>> buffer = io.BytesIO()
>>> RecordWriter(buffer).write(b"abc")
>>> len(buffer.getvalue())           # length, its CRC, data, its CRC
19

Writes scalars, histograms and text to a TensorBoard event file, with
TensorBoard's own event-file writer and protocol buffers: writing to a log
directory never imports TensorFlow (Keras on JAX or PyTorch needs none).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import math
import os
import socket
import struct
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import google_crc32c
import numpy as np
from tensorboard.compat.proto import (
    event_pb2,
    summary_pb2,
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)
from tensorboard.plugins.histogram import metadata as histogram_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer import record_writer
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from keras_gradmon.columns import PLUGIN_NAME, Table
from keras_gradmon.hub import Hub, check_hub

_MASK_DELTA = 0xA282EAD8
#: The steps of a tag scope whose alerts `write_alerts` keeps, to write
#: each again with a later batch of its step (steps come in order; a few
#: spare for monitors publishing a little out of step).
_ALERT_STEPS_KEPT = 4


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C of `data`: the checksum of each record this
    recorder writes, and the one `keras_gradmon.report.records` verifies.
    `google_crc32c` computes the CRC-32C in C where its wheel has the
    extension (`google_crc32c.implementation == "c"`), else with its own
    pure-Python code: the same numbers, slower.

    Example:

    >>> from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
    >>> masked_crc32c(b"abc") == pywrap_tensorflow.masked_crc32c(b"abc")
    True
    """
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class RecordWriter(record_writer.RecordWriter):
    """TensorBoard's `RecordWriter`, its checksums computed in C."""

    def write(self, data: bytes) -> None:
        header = struct.pack("<Q", len(data))
        header_crc = struct.pack("<I", masked_crc32c(header))
        footer_crc = struct.pack("<I", masked_crc32c(data))
        self._writer.write(header + header_crc + data + footer_crc)


#: Numbers the event files of this process: two files opened in one second
#: (the time in a file name has seconds only) get different names.
_file_numbers = itertools.count()
_open_files: weakref.WeakSet = weakref.WeakSet()


class SyncWriter:
    """TensorBoard's `_AsyncWriter`, writing on the caller's thread: the
    callers are a monitor's writer thread (off the training thread already)
    or a monitor that writes once in many steps, and handing each event to
    one more thread cost about what the event itself does. Writes are
    buffered, and flushed at `flush()`, or at a write two minutes after the
    last flush.

    Example:

    >>> import io
    >>> writer = SyncWriter(RecordWriter(io.BytesIO()))
    >>> writer.write(b"abc")
    >>> writer.close()
    """

    def __init__(self, record_writer: RecordWriter, flush_secs: float = 120) -> None:
        self._writer = record_writer
        self._flush_secs = flush_secs
        self._flushed = time.monotonic()
        self._lock = threading.Lock()
        self._closed = False

    def write(self, data: bytes) -> None:
        """Writes one record."""
        with self._lock:
            if self._closed:
                raise OSError("Writer is closed")
            self._writer.write(data)
            if time.monotonic() - self._flushed > self._flush_secs:
                self._flush()

    def flush(self) -> None:
        """Makes what was written visible to readers."""
        with self._lock:
            if self._closed:
                raise OSError("Writer is closed")
            self._flush()

    def _flush(self) -> None:
        self._writer.flush()
        self._flushed = time.monotonic()

    def close(self) -> None:
        """Flushes and closes the file (once)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._writer.flush()
                self._writer.close()


class EventFile(EventFileWriter):
    """TensorBoard's `EventFileWriter`, opened without TensorFlow.

    A new file `events.out.tfevents.<time>.<host>.<pid>.<n>.keras_gradmon`
    in `log_dir` (created if needed; `<n>` numbers the files of the process,
    so that files opened in one second differ) begins with the
    `file_version: brain.Event:2` event, flushed at once; the other events
    are written on the caller's thread (`SyncWriter`), and flushed within
    two minutes, or at `flush()`. A local directory is
    written with Python's file I/O: `EventFileWriter` itself opens files
    through `tensorboard.compat.tf`, which imports TensorFlow wherever it is
    installed. A URL (`gs://`, `s3://`) is left to `EventFileWriter` and its
    file systems (TensorFlow's if installed). Open files are flushed at
    interpreter exit, and closed when no longer referenced.

    Example:

    >>> events = EventFile("/tmp/logs")
    >>> events.add_event(event_pb2.Event(step=1, wall_time=time.time()))
    >>> events.close()
    """

    def __init__(self, log_dir: str) -> None:
        suffix = f".{next(_file_numbers)}.keras_gradmon"
        if "://" in log_dir:
            super().__init__(log_dir, filename_suffix=suffix)
        else:
            self._open_local(log_dir, suffix)
        weakref.finalize(self, self._async_writer.close).atexit = False
        _open_files.add(self)

    def _open_local(self, log_dir: str, suffix: str) -> None:
        # What EventFileWriter.__init__ does, with os and open() for its gfile.
        os.makedirs(log_dir, exist_ok=True)
        self._logdir = log_dir
        host, pid = socket.gethostname(), os.getpid()
        name = f"events.out.tfevents.{int(time.time()):010d}.{host}.{pid}{suffix}"
        self._file_name = os.path.join(log_dir, name)
        self._general_file_writer = open(self._file_name, "wb")  # noqa: SIM115
        self._async_writer = SyncWriter(RecordWriter(self._general_file_writer))
        self.add_event(
            event_pb2.Event(
                wall_time=time.time(),
                file_version="brain.Event:2",
                source_metadata=event_pb2.SourceMetadata(
                    writer="tensorboard.summary.writer.event_file_writer"
                ),
            )
        )
        self.flush()

    @property
    def path(self) -> str:
        """The event file's path."""
        return self._file_name

    def add_serialized(self, event: bytes) -> None:
        """Queues an `Event` already serialized (see `scalar_event`)."""
        self._async_writer.write(event)

    def close(self) -> None:
        """Writes what is queued, ends the writing thread, closes the file."""
        _open_files.discard(self)
        super().close()


def scalar_head(tag: str) -> bytes:
    """The serialized one-value `Summary` of a float32 scalar `tag` (as
    `tf.summary.scalar` stores it: DT_FLOAT, an empty shape, the value's
    bytes in `tensor_content`), without its last 4 bytes: the value's. A
    summary of several tags is the concatenation of theirs (a repeated
    field's entries, serialized one after another).

    Example:

    >>> head = scalar_head("loss")
    >>> summary = summary_pb2.Summary.FromString(head + np.float32(0.5).tobytes())
    >>> summary.value[0].tag, summary.value[0].tensor.tensor_content
    ('loss', b'\\x00\\x00\\x00?')
    """
    return value_head(tag, None, tensor_head(types_pb2.DT_FLOAT, [], 4), 4)


def scalar_event(heads: Sequence[bytes], numbers: np.ndarray, step: int) -> bytes:
    """A serialized `Event` at `step` (wall time now) whose summary holds a
    float32 scalar per `scalar_head`: the protocol buffer's bytes put
    together without building its hundred messages (about 30 times faster).

    Example:

    >>> data = scalar_event([scalar_head("a")], np.float32([2.0]), step=7)
    >>> event = event_pb2.Event.FromString(data)
    >>> event.step, event.summary.value[0].tag
    (7, 'a')
    """
    values = numbers.astype("<f4").tobytes()
    summary = b"".join(
        head + values[4 * k : 4 * k + 4] for k, head in enumerate(heads)
    )
    return summary_event(summary, step)


def summary_event(summary: bytes, step: int) -> bytes:
    """A serialized `Event` at `step` (wall time now) of a serialized
    `Summary`.

    Example:

    >>> event_pb2.Event.FromString(summary_event(b"", 3)).step
    3
    """
    header = event_pb2.Event(wall_time=time.time(), step=int(step))
    return b"".join(
        (header.SerializeToString(), b"\x2a", varint(len(summary)), summary)
    )


def varint(n: int) -> bytes:
    """`n` as a protocol buffer varint (a length or a key's number), for the
    summaries serialized by hand (here and in the legacy in-graph writer).

    Example:

    >>> varint(300)
    b'\\xac\\x02'
    """
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


#: `Summary.value` (field 1) and `Summary.Value.tensor` (field 8), both
#: length-delimited: their protobuf keys.
_VALUE_KEY, _TENSOR_KEY = b"\x0a", b"\x42"


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
    tag: str, metadata: summary_pb2.SummaryMetadata | None, tensor: bytes, size: int
) -> bytes:
    """The encoding of one `Summary.value` entry up to its value's `size`
    raw bytes: tag, metadata (None: none) and the head of its tensor
    (`tensor_head`)."""
    value = summary_pb2.Summary.Value(tag=tag, metadata=metadata).SerializeToString()
    inner = value + _TENSOR_KEY + varint(len(tensor) + size) + tensor
    return _VALUE_KEY + varint(len(inner) + size) + inner


@atexit.register
def _flush_open_files() -> None:
    """At interpreter exit, writes what open event files have queued."""
    for events in list(_open_files):
        with contextlib.suppress(Exception):  # nobody is left to tell
            events.flush()


class TensorBoardRecorder:
    """Writes `{tag: value}` scalars, `{tag: [k, 3]}` histograms, text, the
    per-variable tables and the alerts.

    All the values of one call are packed into one `Summary` protocol buffer
    on the host and written as one event (with its step and wall time), so
    writing a hundred tags costs about what one scalar does. The values are
    stored exactly as `tf.summary.scalar`, `tf.summary.histogram` and
    `tf.summary.text` store them (tensor values with the plugin metadata in
    each tag's first event of a file), so TensorBoard's dashboards and
    readers see no difference.

    With `log_dir`, the events go to an `EventFile` (TensorBoard's own
    writer; no TensorFlow), opened on the first write (TensorFlow's writer
    where TensorFlow is imported already: see `writer`); `close()` closes
    it, and a later write opens a new file. With `writer`, they go through
    TensorFlow (`tf.summary.experimental.write_raw_pb`), imported then.

    Args:
        log_dir: Directory for a new event file, created on the first write.
        writer: An existing `tf.summary` writer to use instead.

    Example:

    >>> recorder = TensorBoardRecorder("/tmp/logs")
    >>> recorder.write_scalars({"grad_norm/global": 0.5}, step=0)
    >>> recorder.close()
    """

    def __init__(
        self, log_dir: str | os.PathLike | None = None, writer: Any = None
    ) -> None:
        if (log_dir is None) == (writer is None):
            raise ValueError(
                "Pass exactly one of `log_dir` and `writer`. Received: "
                f"log_dir={log_dir!r}, writer={writer!r}"
            )
        if log_dir is not None:
            log_dir = check_log_dir("log_dir", log_dir)
        if writer is not None and not hasattr(writer, "as_default"):
            raise ValueError(
                "`writer` must be a tf.summary writer (from "
                "`tf.summary.create_file_writer`). Received: "
                f"writer={writer!r}"
            )
        self.log_dir = log_dir
        self._writer = writer
        self._owns_writer = writer is None
        self._lock = threading.RLock()  # the training and writing threads
        self._scalar_metadata = scalar_metadata.create_summary_metadata(
            display_name="", description=""
        )
        self._histogram_metadata = histogram_metadata.create_summary_metadata(
            display_name="", description=""
        )
        self._text_metadata = text_metadata.create_summary_metadata(
            display_name="", description=""
        )
        # TensorBoard needs a tag's plugin metadata in its first event only.
        self._described: set[str] = set()
        self._heads: dict[str, bytes] = {}  # see `scalar_head`
        self._table_heads: dict[tuple, bytes] = {}  # see `write_table`
        # The alerts of the last few steps of each tag scope (`write_alerts`).
        self._alerts: dict[str | None, dict[int, list[tuple[str, dict]]]] = {}

    @property
    def destination(self) -> Any:
        """The log directory's real path, or the given writer."""
        if self.log_dir is not None:
            return os.path.realpath(self.log_dir)
        return self._writer

    @property
    def writer(self) -> Any:
        """The event file (opened on first use: TensorBoard's event-file
        writer, its records' CRC32C computed in C), or the given writer."""
        with self._lock:
            if self._writer is None:
                self._writer = EventFile(self.log_dir)
            return self._writer

    def write_scalars(self, values: Mapping[str, float], step: int) -> None:
        """Writes each `{tag: value}` as a scalar at `step`."""
        with np.errstate(over="ignore"):  # beyond float32: inf, as in TensorFlow
            numbers = np.asarray(list(values.values()), dtype=np.float32)
        with self._lock:
            writer = self.writer
            if isinstance(writer, EventFile) and self._described.issuperset(values):
                heads = [self._head(tag) for tag in values]
                writer.add_serialized(scalar_event(heads, numbers, step))
                return
            summary = summary_pb2.Summary()
            for tag, number in zip(values, numbers):
                entry = summary.value.add(tag=tag)
                self._describe(entry, self._scalar_metadata)
                # As TensorFlow stores a float32 scalar: DT_FLOAT, an empty
                # shape, the value's bytes in `tensor_content`.
                entry.tensor.dtype = 1
                entry.tensor.tensor_shape.SetInParent()
                entry.tensor.tensor_content = number.tobytes()
            self._write(summary, step)

    def write_histograms(self, histograms: Mapping[str, np.ndarray], step: int) -> None:
        """Writes each `{tag: [k, 3] (left, right, count)}` as a histogram."""
        with self._lock:
            summary = summary_pb2.Summary()
            for tag, buckets in histograms.items():
                entry = summary.value.add(
                    tag=tag,
                    tensor=tensor_util.make_tensor_proto(
                        np.asarray(buckets, dtype=np.float64)
                    ),
                )
                self._describe(entry, self._histogram_metadata)
            self._write(summary, step)

    def write_text(self, tag: str, lines: Sequence[str], step: int) -> None:
        """Writes `lines` as one text summary (a vector of strings) at `step`."""
        with self._lock:
            summary = summary_pb2.Summary()
            entry = summary.value.add(
                tag=tag,
                tensor=tensor_util.make_tensor_proto(np.asarray(lines, dtype=object)),
            )
            self._describe(entry, self._text_metadata)
            self._write(summary, step)

    def write_table(self, table: Table, step: int) -> None:
        """Writes `table` as one float32 tensor summary at `step`, as
        `tf.summary.write` would, its row and column names in the metadata
        of the tag's first event (plugin `keras_gradmon`: no Scalars chart).
        Serialized from a cached head, as `scalar_event`."""
        values = np.ascontiguousarray(table.values, dtype="<f4")
        with self._lock:
            writer, tag, key = self.writer, table.tag, (table.tag, values.shape)
            if tag not in self._described:  # the first event: with metadata
                self._described.add(tag)
                head = table_head(table, table_metadata(table))
            elif key not in self._table_heads:
                head = self._table_heads[key] = table_head(table)
            else:
                head = self._table_heads[key]
            summary = head + values.tobytes()
            if isinstance(writer, EventFile):
                writer.add_serialized(summary_event(summary, step))
            else:
                _write_raw(writer, summary_pb2.Summary.FromString(summary), step)

    def write_alerts(self, batch: Any, step: int) -> None:
        """Writes the alerts of `batch` (a `keras_gradmon.alerts.log.
        AlertBatch`) at `step` as one event: a Markdown table
        (`batch.markdown`) of the step's alerts written under its
        `batch.markdown_tag`, for the Text tab, and the records
        (`Alert.to_dict()`, as JSON strings) of every source under
        `batch.records_tag`, plugin `keras_gradmon`. Both hold every alert
        this recorder was given for that step and scope so far: TensorBoard
        shows the last event of a step, so a second batch of a step
        (another monitor's, an evaluation's) hides none of the first."""
        text_tag = getattr(batch, "markdown_tag", batch.text_tag)
        with self._lock:
            steps = self._alerts.setdefault(batch.scope, {})
            records = steps.setdefault(int(step), [])
            records += [(text_tag, record) for record in batch.records()]
            if len(steps) > _ALERT_STEPS_KEPT:
                del steps[next(iter(steps))]
            summary = summary_pb2.Summary()
            own = [record for where, record in records if where == text_tag]
            markdown = np.array(batch.markdown(own), dtype=object)
            entry = summary.value.add(
                tag=text_tag, tensor=tensor_util.make_tensor_proto(markdown)
            )
            self._describe(entry, self._text_metadata)
            lines = np.array([json.dumps(r) for _, r in records], dtype=object)
            entry = summary.value.add(
                tag=batch.records_tag,
                tensor=tensor_util.make_tensor_proto(lines),
            )
            self._describe(entry, record_metadata(batch.content()))
            self._write(summary, step)

    def _head(self, tag: str) -> bytes:
        head = self._heads.get(tag)
        if head is None:
            head = self._heads[tag] = scalar_head(tag)
        return head

    def _describe(self, entry: Any, metadata: Any) -> None:
        if entry.tag not in self._described:
            entry.metadata.CopyFrom(metadata)
            self._described.add(entry.tag)

    def flush(self) -> None:
        """Flushes the event file."""
        with self._lock:
            if self._writer is not None:
                self._writer.flush()

    def close(self) -> None:
        """Flushes; closes the event file if this recorder opened it (a new
        one, describing its tags again, is opened by the next write)."""
        with self._lock:
            if self._writer is None:
                return
            if self._owns_writer:
                self._writer.close()
                self._writer = None
                self._described.clear()
            else:
                self._writer.flush()

    def _write(self, summary: summary_pb2.Summary, step: int) -> None:
        if not summary.value:
            return
        writer = self.writer
        if isinstance(writer, EventFile):
            event = event_pb2.Event(
                wall_time=time.time(), step=int(step), summary=summary
            )
            writer.add_event(event)
        else:
            _write_raw(writer, summary, step)


def _write_raw(writer: Any, summary: summary_pb2.Summary, step: int) -> None:
    """Writes `summary` at `step` with a `tf.summary` writer."""
    import tensorflow as tf

    with writer.as_default():
        tf.summary.experimental.write_raw_pb(
            # A NumPy int, not a Python one: TensorFlow's eager runtime
            # caches a tensor per distinct Python int it converts (a
            # new step each write grows that cache without bound).
            summary.SerializeToString(),
            step=np.int64(step),
        )


def table_head(
    table: Table, metadata: summary_pb2.SummaryMetadata | None = None
) -> bytes:
    """`value_head` of `table` (its tag, float32 values of its shape), with
    `metadata` (None: none).

    Example:

    >>> from keras_gradmon.columns import Table
    >>> table = Table(("w",), ("grad_norm",), np.float32([[0.5]]))
    >>> summary_pb2.Summary.FromString(table_head(table) + bytes(4)).value[0].tag
    'keras_gradmon/variables'
    """
    shape = np.shape(table.values)
    size = 4 * math.prod(shape)
    tensor = tensor_head(types_pb2.DT_FLOAT, shape, size)
    return value_head(table.tag, metadata, tensor, size)


def table_metadata(table: Table) -> summary_pb2.SummaryMetadata:
    """The summary metadata of `table`'s tag: plugin `keras_gradmon`, its
    names as the plugin content, a tensor (not a scalar) time series.

    Example:

    >>> from keras_gradmon.columns import Table
    >>> table = Table(("w",), ("grad_norm",), np.float32([[0.5]]))
    >>> table_metadata(table).plugin_data.plugin_name
    'keras_gradmon'
    """
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME, content=table.content()
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )


def record_metadata(content: bytes) -> summary_pb2.SummaryMetadata:
    """The summary metadata of a keras_gradmon record (the alerts'): plugin
    `keras_gradmon`, `content` (JSON naming its kind), a tensor time series.

    Example:

    >>> record_metadata(b'{"kind": "alerts"}').plugin_data.plugin_name
    'keras_gradmon'
    """
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME, content=content
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )


def check_log_dir(name: str, value: object) -> str:
    """`value` as a path string, if it is a non-empty str or os.PathLike.

    Example:

    >>> check_log_dir("log_dir", "logs")
    'logs'
    """
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise ValueError(
            f"`{name}` must be a directory path (a non-empty str or "
            f"os.PathLike). Received: {name}={value!r}"
        )
    return value


def recording_hub(log_dir: Any, writer: Any, hub: Hub | None = None) -> Hub:
    """`hub`, or a hub of its own writing to TensorBoard at `log_dir` (or
    through `writer`), or one with no recorder when neither is given.

    Example:

    >>> recording_hub(None, None).recorders
    []
    """
    check_hub(hub, log_dir, writer)
    if hub is not None:
        return hub
    if log_dir is None and writer is None:
        return Hub()
    return Hub([TensorBoardRecorder(log_dir=log_dir, writer=writer)])
