"""The event-file source of the report: the runs under a log directory,
read into `accumulator.RunAccumulator`s.

No TensorFlow is imported: the records come from `records.read_records`
(every checksum verified, damage reported as `FileDamage`) and are parsed
with TensorBoard's `event_pb2`. A value's number is read straight from its
`TensorProto` (`float_val`, `double_val`, `tensor_content`, ...; TensorFlow's
own decoding only for the rare kinds without a fast path), histograms are
named without decoding their buckets, and values of plugins the report does
not read are not decoded at all. A legacy `simple_value` reads as a scalar
and a legacy `histo` as a histogram tag, as TensorBoard's `data_compat`
migrates them.
"""

from __future__ import annotations

import os

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from keras_gradmon.report.accumulator import Run, RunAccumulator
from keras_gradmon.report.records import (
    Damage,
    FileDamage,
    RecordReader,
    read_records,
)
from keras_gradmon.report.series import BATCH, MAX_POINTS

__all__ = [
    "Damage",
    "FileDamage",
    "ReportError",
    "Run",
    "load_run",
    "load_runs",
    "read_records",
    "run_directories",
    "run_name",
]

_EVENT_FILE = "events.out.tfevents."
#: NumPy dtypes of the `DataType`s read without TensorFlow's decoding, and
#: the `TensorProto` field holding their values when not in `tensor_content`.
_DTYPES = {
    1: (np.float32, "float_val"),
    2: (np.float64, "double_val"),
    3: (np.int32, "int_val"),
    4: (np.uint8, "int_val"),
    5: (np.int16, "int_val"),
    6: (np.int8, "int_val"),
    9: (np.int64, "int64_val"),
    17: (np.uint16, "int_val"),
    22: (np.uint32, "uint32_val"),
    23: (np.uint64, "uint64_val"),
}
_HALF = 19
_FLOAT = 1
_PLUGIN = "keras_gradmon"


class ReportError(ValueError):
    """A log directory that cannot be reported on (the CLI exits with 2)."""


def run_directories(log_dir: str) -> list[str]:
    """The directories under `log_dir` (itself included) holding event files.

    Raises:
        ReportError: `log_dir` is missing, is a file, or holds no event file.
    """
    if os.path.isfile(log_dir):
        parent = os.path.dirname(os.path.abspath(log_dir))
        raise ReportError(
            f"LOGDIR must be a directory, and {log_dir!r} is a file. Pass the "
            f"directory that holds the event files (here perhaps {parent!r})."
        )
    if not os.path.isdir(log_dir):
        raise ReportError(f"No such log directory: {log_dir!r}")
    found = [
        root
        for root, _, files in os.walk(log_dir)
        if any(name.startswith(_EVENT_FILE) for name in files)
    ]
    if not found:
        raise ReportError(
            f"No TensorBoard event files (events.out.tfevents.*) under {log_dir!r}"
        )
    return sorted(found)


def _tensor(tensor: object) -> np.ndarray:
    """The NumPy array of a `TensorProto`, without TensorFlow."""
    shape = tuple(d.size for d in tensor.tensor_shape.dim)
    known = _DTYPES.get(tensor.dtype)
    if known is not None and tensor.tensor_content:
        return np.frombuffer(tensor.tensor_content, known[0]).reshape(shape)
    if known is not None:
        values = np.array(getattr(tensor, known[1]), known[0])
    elif tensor.dtype == _HALF and not tensor.tensor_content:
        values = np.array(tensor.half_val, np.uint16).view(np.float16)
    else:
        return tensor_util.make_ndarray(tensor)
    size = int(np.prod(shape, dtype=np.int64))
    if values.size == size:
        return values.reshape(shape)
    if values.size == 0:
        return np.zeros(shape, values.dtype)
    # TensorFlow's short form: the last value repeats to fill the shape.
    return np.concatenate([values, np.repeat(values[-1:], size - values.size)]).reshape(
        shape
    )


class _FileReader:
    """Feeds one run's event files to its accumulator, remembering each
    tag's plugin across the files (its latest metadata: a resumed run's
    table may name other rows)."""

    def __init__(self, accumulator: RunAccumulator) -> None:
        self.accumulator = accumulator
        self.plugins: dict[str, tuple[str, bytes]] = {}
        # float32 scalars (what tf.summary.scalar writes) not yet handed over
        self.floats: dict[str, tuple[list[int], list[bytes]]] = {}

    def read(self, path: str) -> FileDamage | None:
        records = RecordReader(path)
        events, first, last = 0, None, None
        for record in records:
            try:
                event = event_pb2.Event.FromString(record)
            except DecodeError:
                self.accumulator.count_unread(f"{path}: records that are no event")
                continue
            events += 1
            if event.WhichOneof("what") == "summary":
                step = event.step
                first = step if first is None else min(first, step)
                last = step if last is None else max(last, step)
                for value in event.summary.value:
                    self._value(step, value)
        for tag in list(self.floats):
            if tag in self.floats:
                self._hand_over(tag)
        if records.damage is None:
            return None
        steps = None if first is None else (first, last)
        return FileDamage(records.damage, events, steps)

    def _value(self, step: int, value: object) -> None:
        tag = value.tag
        if value.HasField("metadata"):
            data = value.metadata.plugin_data
            known = self.plugins[tag] = (data.plugin_name, data.content)
        else:
            known = self.plugins.get(tag)
        plugin, content = known or ("", b"")
        if plugin == "scalars":  # the fast path: the value's 4 bytes, kept
            tensor = value.tensor
            number = tensor.tensor_content
            if len(number) == 4 and tensor.dtype == _FLOAT:
                pending = self.floats.get(tag)
                if pending is None:
                    pending = self.floats[tag] = ([], [])
                pending[0].append(step)
                pending[1].append(number)
                if len(pending[0]) >= BATCH:
                    self._hand_over(tag)
                return
        if tag in self.floats:  # keeps the tag's values in their order
            self._hand_over(tag)
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            self.accumulator.add_scalar(tag, step, value.simple_value)
        elif kind == "histo" or plugin == "histograms":
            self.accumulator.add_histogram_tag(tag)
        elif kind == "tensor" and plugin in ("scalars", "", "text", _PLUGIN):
            self._tensor(tag, step, value.tensor, plugin, content)

    def _hand_over(self, tag: str) -> None:
        """Hands over the pending values of `tag` and of its siblings (the
        tags that differ in their last segment: a layer's variables)
        together, so that each keeps the others' peaks (`series.Peaks`)."""
        group = tag.rsplit("/", 1)[0]
        batches = {}
        for name in [t for t in self.floats if t.rsplit("/", 1)[0] == group]:
            steps, numbers = self.floats.pop(name)
            values = np.frombuffer(b"".join(numbers), "<f4").astype(np.float64)
            batches[name] = (np.array(steps, np.int64), values)
        self.accumulator.add_scalar_batches(batches)

    def _tensor(
        self, tag: str, step: int, tensor: object, plugin: str, content: bytes
    ) -> None:
        try:
            array = _tensor(tensor)
        except (ValueError, TypeError):
            self.accumulator.count_unread(f"{tag}: tensors that cannot be decoded")
            return
        self.accumulator.add_tensor(tag, step, array, plugin, content)


def load_run(path: str, name: str, max_points: int | None = MAX_POINTS) -> Run:
    """Reads every scalar, histogram tag and alert of one run directory.

    Event files are read in name order (their names start with the time
    they were created). Each scalar tag keeps at most `max_points` points
    (None: all) beside exact aggregates (`series.Series`); a step written
    twice keeps its last value among the kept points and in `last`, and its
    first in the other aggregates when the two were read far apart (a
    resumed run; `Series.rewritten`, named in `Run.unread_notes`).

    Example:

    >>> run = load_run("logs/run1", "run1")  # doctest: +SKIP
    >>> run.stats("grad_norm/global").high  # doctest: +SKIP
    """
    reader, damaged = _FileReader(RunAccumulator(max_points)), []
    for file in sorted(os.listdir(path)):
        full = os.path.join(path, file)
        if file.startswith(_EVENT_FILE) and os.path.isfile(full):
            found = reader.read(full)
            if found is not None:
                damaged.append(found)
    return reader.accumulator.run(name, damaged)


def load_runs(log_dir: str, max_points: int | None = MAX_POINTS) -> list[Run]:
    """Every run under `log_dir`, named by its path relative to `log_dir`
    (`log_dir` itself by its own name: `logs/dqn_run` is run `dqn_run`).

    Raises:
        ReportError: `log_dir` is missing, is a file, or holds no event file.
    """
    return [
        load_run(path, run_name(path, log_dir), max_points)
        for path in run_directories(log_dir)
    ]


def run_name(path: str, log_dir: str) -> str:
    """The name of run directory `path` under `log_dir`: its relative path, or
    the directory's own name when it is `log_dir` itself."""
    name = os.path.relpath(path, log_dir)
    if name != os.curdir:
        return name
    full = os.path.abspath(log_dir)
    return os.path.basename(full) or full
