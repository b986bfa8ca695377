"""Writes scalars and histograms to a TensorBoard event file."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.histogram import metadata as histogram_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.util import tensor_util


class TensorBoardRecorder:
    """Writes `{tag: value}` scalars and `{tag: [k, 3]}` histograms.

    All the values of one call are packed into one `Summary` protocol buffer
    on the host and written with a single op
    (`tf.summary.experimental.write_raw_pb`), so writing a hundred tags costs
    about what one `tf.summary.scalar` does. The values are stored exactly as
    `tf.summary.scalar` and `tf.summary.histogram` store them (tensor values
    with the scalars / histograms plugin metadata), so TensorBoard's
    dashboards and readers see no difference.

    Args:
        log_dir: Directory for a new event file, created on the first write.
        writer: An existing `tf.summary` writer to use instead.

    Example:

    >>> recorder = TensorBoardRecorder("/tmp/logs")
    >>> recorder.write_scalars({"grad_norm/global": 0.5}, step=0)
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

    @property
    def destination(self) -> Any:
        """The log directory's real path, or the given writer."""
        if self.log_dir is not None:
            return os.path.realpath(self.log_dir)
        return self._writer

    @property
    def writer(self) -> Any:
        """The `tf.summary` writer, created on first use."""
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        return self._writer

    def write_scalars(self, values: Mapping[str, float], step: int) -> None:
        """Writes each `{tag: value}` as a scalar at `step`."""
        summary = summary_pb2.Summary()
        for tag, value in values.items():
            entry = summary.value.add(tag=tag)
            self._describe(entry, self._scalar_metadata)
            entry.tensor.dtype = 1  # DT_FLOAT, a scalar (empty shape)
            entry.tensor.float_val.append(value)
        self._write(summary, step)

    def write_histograms(self, histograms: Mapping[str, np.ndarray], step: int) -> None:
        """Writes each `{tag: [k, 3] (left, right, count)}` as a histogram."""
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
        summary = summary_pb2.Summary()
        entry = summary.value.add(
            tag=tag,
            tensor=tensor_util.make_tensor_proto(np.asarray(lines, dtype=object)),
        )
        self._describe(entry, self._text_metadata)
        self._write(summary, step)

    def _describe(self, entry: Any, metadata: Any) -> None:
        if entry.tag not in self._described:
            entry.metadata.CopyFrom(metadata)
            self._described.add(entry.tag)

    def flush(self) -> None:
        """Flushes the event file."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flushes; closes the event file if this recorder opened it (a new
        one is opened by the next write)."""
        if self._writer is None:
            return
        if self._owns_writer:
            self._writer.close()
            self._writer = None
        else:
            self._writer.flush()

    def _write(self, summary: summary_pb2.Summary, step: int) -> None:
        if not summary.value:
            return
        with self.writer.as_default():
            tf.summary.experimental.write_raw_pb(
                # A NumPy int, not a Python one: TensorFlow's eager runtime
                # caches a tensor per distinct Python int it converts (a
                # new step each write grows that cache without bound).
                summary.SerializeToString(), step=np.int64(step)
            )


def check_log_dir(name: str, value: object) -> str:
    """`value` as a path string, if it is a non-empty str or os.PathLike."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise ValueError(
            f"`{name}` must be a directory path (a non-empty str or "
            f"os.PathLike). Received: {name}={value!r}"
        )
    return value
