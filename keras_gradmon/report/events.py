"""Reads the runs under a log directory: TensorBoard's protocol buffers and
read-time migrations, over a reader that verifies every record's checksum.

No TensorFlow is imported: the records come from `records.read_records`,
the events are parsed with TensorBoard's `event_pb2` and passed through the
same `data_compat` / `dataclass_compat` migrations TensorBoard applies, so a
scalar written as a legacy `simple_value` reads like a `tf.summary.scalar`.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard import data_compat, dataclass_compat
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from keras_gradmon.alerts.events import ALERT_LOG
from keras_gradmon.report.records import Damage, read_records

_EVENT_FILE = "events.out.tfevents."


class ReportError(ValueError):
    """A log directory that cannot be reported on (the CLI exits with 2)."""


@dataclasses.dataclass
class FileDamage:
    """A damaged event file, and what was read from it.

    Attributes:
        damage: Where and what (see `records.Damage`).
        events: Events read from the file.
        steps: `(first, last)` step of the summaries read, or None.
    """

    damage: Damage
    events: int
    steps: tuple[int, int] | None

    @property
    def message(self) -> str:
        """One paragraph naming the file, the problem and what was read."""
        d = self.damage
        read = f"{d.records_read} record(s), {self.events} event(s)"
        if self.steps is not None:
            read += f", steps {self.steps[0]} to {self.steps[1]}"
        tail = (
            "nothing after that point could be read"
            if d.truncated
            else "the records after it were read"
        )
        return (
            f"Damaged event file {d.path!r} ({d.size:,} bytes): {d.problem}, at "
            f"byte {d.offset:,}; {tail}. Read from it: {read}. TensorBoard "
            f"shows nothing of this file after byte {d.offset:,}."
        )


@dataclasses.dataclass
class Run:
    """The numbers of one run (one directory of event files).

    Attributes:
        name: The directory relative to the log directory (the log
            directory's own name for itself).
        scalars: `{tag: {step: value}}` of every scalar.
        histogram_tags: The histogram tags.
        alerts: The alerts written by keras_gradmon (`Alert.to_dict()`
            dicts, plus the "scope" of their tag), in step order.
        damaged: The damaged event files of the run, if any.
    """

    name: str
    scalars: dict[str, dict[int, float]]
    histogram_tags: list[str]
    alerts: list[dict]
    damaged: list[FileDamage] = dataclasses.field(default_factory=list)

    def series(self, tag: str) -> tuple[np.ndarray, np.ndarray]:
        """`(steps, values)` of a scalar tag, sorted by step (empty if absent)."""
        points = sorted(self.scalars.get(tag, {}).items())
        steps = np.array([s for s, _ in points], dtype=np.int64)
        values = np.array([v for _, v in points], dtype=np.float64)
        return steps, values


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


@dataclasses.dataclass
class _Reading:
    scalars: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)
    histograms: set[str] = dataclasses.field(default_factory=set)
    alerts: list[dict] = dataclasses.field(default_factory=list)
    plugins: dict[str, str] = dataclasses.field(default_factory=dict)


def _alerts(tag: str, value: np.ndarray) -> list[dict]:
    # alert_log/all or alert_log/<scope>/all
    scope = "/".join(tag.split("/")[1:-1]) or None
    found = []
    for line in np.ravel(value):
        text = line.decode() if isinstance(line, bytes) else str(line)
        try:
            alert = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(alert, dict):
            found.append({**alert, "scope": scope})
    return found


def _add_value(reading: _Reading, step: int, value: object) -> None:
    tag = value.tag
    if value.HasField("metadata") and tag not in reading.plugins:
        reading.plugins[tag] = value.metadata.plugin_data.plugin_name
    plugin = reading.plugins.get(tag, "")
    if not value.HasField("tensor"):
        return
    if plugin == "histograms":
        reading.histograms.add(tag)
    elif plugin == "text" and tag.split("/", 1)[0] == ALERT_LOG:
        reading.alerts.extend(_alerts(tag, tensor_util.make_ndarray(value.tensor)))
    elif plugin in ("scalars", ""):
        array = tensor_util.make_ndarray(value.tensor)
        if array.size == 1 and array.dtype.kind in "fiu":
            reading.scalars.setdefault(tag, {})[step] = float(array.reshape(()))


def _read_file(path: str, reading: _Reading) -> FileDamage | None:
    records, damage = read_records(path)
    events, steps = 0, []
    initial_metadata: dict = {}
    for record in records:
        try:
            event = event_pb2.Event.FromString(record)
        except DecodeError:
            continue
        event = data_compat.migrate_event(event)
        for migrated in dataclass_compat.migrate_event(event, initial_metadata):
            events += 1
            if migrated.HasField("summary"):
                steps.append(migrated.step)
                for value in migrated.summary.value:
                    _add_value(reading, migrated.step, value)
    if damage is None:
        return None
    return FileDamage(damage, events, (min(steps), max(steps)) if steps else None)


def load_run(path: str, name: str) -> Run:
    """Reads every scalar, histogram tag and alert of one run directory.

    Event files are read in name order (their names start with the time
    they were created); a step written twice keeps its last value.
    """
    reading, damaged = _Reading(), []
    for file in sorted(os.listdir(path)):
        full = os.path.join(path, file)
        if file.startswith(_EVENT_FILE) and os.path.isfile(full):
            found = _read_file(full, reading)
            if found is not None:
                damaged.append(found)
    reading.alerts.sort(key=lambda a: int(a.get("step", 0)))
    return Run(
        name, reading.scalars, sorted(reading.histograms), reading.alerts, damaged
    )


def load_runs(log_dir: str) -> list[Run]:
    """Every run under `log_dir`, named by its path relative to `log_dir`
    (`log_dir` itself by its own name: `logs/dqn_run` is run `dqn_run`).

    Raises:
        ReportError: `log_dir` is missing, is a file, or holds no event file.
    """
    return [
        load_run(path, run_name(path, log_dir)) for path in run_directories(log_dir)
    ]


def run_name(path: str, log_dir: str) -> str:
    """The name of run directory `path` under `log_dir`: its relative path, or
    the directory's own name when it is `log_dir` itself."""
    name = os.path.relpath(path, log_dir)
    if name != os.curdir:
        return name
    full = os.path.abspath(log_dir)
    return os.path.basename(full) or full
