"""Writes scalars and histograms to a TensorBoard event file."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf
from tensorboard.plugins.histogram import metadata as histogram_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata


class TensorBoardRecorder:
    """Writes `{tag: value}` scalars and `{tag: [k, 3]}` histograms.

    All the values of one call go through one `tf.function`, traced once per
    recorder, so writing a hundred tags costs about one eager op.

    Args:
        log_dir: Directory for a new event file, created on the first write.
        writer: An existing `tf.summary` writer to use instead.

    Example:

    >>> recorder = TensorBoardRecorder("/tmp/logs")
    >>> recorder.write_scalars({"grad_norm/global": 0.5}, step=0)
    """

    def __init__(self, log_dir: str | None = None, writer: Any = None) -> None:
        if (log_dir is None) == (writer is None):
            raise ValueError(
                "Pass exactly one of `log_dir` and `writer`. Received: "
                f"log_dir={log_dir!r}, writer={writer!r}"
            )
        self.log_dir = log_dir
        self._writer = writer
        self._functions: dict[tuple, Callable] = {}

    @property
    def writer(self) -> Any:
        """The `tf.summary` writer, created on first use."""
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        return self._writer

    def write_scalars(self, values: Mapping[str, float], step: int) -> None:
        """Writes each `{tag: value}` as a scalar at `step`."""
        if values:
            self._write("scalars", values, tf.float32, step)

    def write_histograms(self, histograms: Mapping[str, np.ndarray], step: int) -> None:
        """Writes each `{tag: [k, 3] (left, right, count)}` as a histogram."""
        if histograms:
            self._write("histograms", histograms, tf.float64, step)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def _write(
        self, kind: str, data: Mapping[str, Any], dtype: tf.DType, step: int
    ) -> None:
        if kind not in self._functions:
            self._functions[kind] = self._make_function(kind)
        self._functions[kind](
            tf.constant(list(data), tf.string),
            tf.constant(np.stack([np.asarray(v) for v in data.values()]), dtype),
            tf.constant(step, tf.int64),
        )

    def _make_function(self, kind: str) -> Callable:
        # One trace per recorder: tags are a string tensor, looped over in
        # the graph, so a new set of tags never retraces.
        writer = self.writer
        plugin = scalar_metadata if kind == "scalars" else histogram_metadata
        metadata = plugin.create_summary_metadata(
            display_name="", description=""
        ).SerializeToString()
        rank = 1 if kind == "scalars" else 3
        dtype = tf.float32 if kind == "scalars" else tf.float64

        @tf.function(
            input_signature=[
                tf.TensorSpec([None], tf.string),
                tf.TensorSpec([None] * rank, dtype),
                tf.TensorSpec([], tf.int64),
            ],
            autograph=False,
            jit_compile=False,
        )
        def write(tags: tf.Tensor, values: tf.Tensor, step: tf.Tensor) -> None:
            with writer.as_default():

                def body(i: tf.Tensor) -> tf.Tensor:
                    tf.summary.write(tags[i], values[i], step=step, metadata=metadata)
                    return i + 1

                tf.while_loop(lambda i: i < tf.size(tags), body, [tf.constant(0)])

        return write
