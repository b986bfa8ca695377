"""Writes scalars and histograms to a TensorBoard event file."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf
from tensorboard.plugins.histogram import metadata as histogram_metadata


class TensorBoardRecorder:
    """Writes `{tag: value}` scalars and `{tag: [k, 3]}` histograms.

    All the values of one call go through one compiled `tf.function` (cached
    per tag set), so writing a hundred tags costs about one eager op.

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
        if not values:
            return
        tags = tuple(values)
        key = ("scalars", tags)
        if key not in self._functions:
            self._functions[key] = self._scalar_function(tags)
        self._functions[key](
            tf.constant([values[t] for t in tags], tf.float32),
            tf.constant(step, tf.int64),
        )

    def write_histograms(self, histograms: Mapping[str, np.ndarray], step: int) -> None:
        """Writes each `{tag: [k, 3] (left, right, count)}` as a histogram."""
        if not histograms:
            return
        tags = tuple(histograms)
        key = ("histograms", tags)
        if key not in self._functions:
            self._functions[key] = self._histogram_function(tags)
        self._functions[key](
            tf.constant(np.stack([histograms[t] for t in tags]), tf.float64),
            tf.constant(step, tf.int64),
        )

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def _scalar_function(self, tags: tuple[str, ...]) -> Callable:
        writer = self.writer

        @tf.function(autograph=False, jit_compile=False)
        def write(values: tf.Tensor, step: tf.Tensor) -> None:
            with writer.as_default():
                for i, name in enumerate(tags):
                    tf.summary.scalar(name, values[i], step=step)

        return write

    def _histogram_function(self, tags: tuple[str, ...]) -> Callable:
        writer = self.writer
        metadata = [
            histogram_metadata.create_summary_metadata(display_name=t, description="")
            for t in tags
        ]

        @tf.function(autograph=False, jit_compile=False)
        def write(buckets: tf.Tensor, step: tf.Tensor) -> None:
            with writer.as_default():
                for i, name in enumerate(tags):
                    tf.summary.write(name, buckets[i], step=step, metadata=metadata[i])

        return write
