"""Reads the runs under a log directory with TensorBoard's own reader."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

from keras_gradmon.recorders.alerts import ALERT_LOG

_EVENT_FILE = "events.out.tfevents."


class ReportError(ValueError):
    """A log directory that cannot be reported on (the CLI exits with 2)."""


@dataclasses.dataclass
class Run:
    """The numbers of one run (one directory of event files).

    Attributes:
        name: The directory relative to the log directory ("." for itself).
        scalars: `{tag: {step: value}}` of every scalar.
        histogram_tags: The histogram tags.
        alerts: The alerts written by keras_gradmon (`Alert.to_dict()`
            dicts, plus the "scope" of their tag), in step order.
    """

    name: str
    scalars: dict[str, dict[int, float]]
    histogram_tags: list[str]
    alerts: list[dict]

    def series(self, tag: str) -> tuple[np.ndarray, np.ndarray]:
        """`(steps, values)` of a scalar tag, sorted by step (empty if absent)."""
        points = sorted(self.scalars.get(tag, {}).items())
        steps = np.array([s for s, _ in points], dtype=np.int64)
        values = np.array([v for _, v in points], dtype=np.float64)
        return steps, values


def run_directories(log_dir: str) -> list[str]:
    """The directories under `log_dir` (itself included) holding event files.

    Raises:
        ReportError: `log_dir` is missing, or holds no event file.
    """
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


def _value(proto: object) -> np.ndarray:
    return tensor_util.make_ndarray(proto)


def load_run(path: str, name: str) -> Run:
    """Reads every scalar, histogram tag and alert of one run directory."""
    accumulator = event_accumulator.EventAccumulator(
        path,
        size_guidance={
            event_accumulator.SCALARS: 0,
            event_accumulator.TENSORS: 0,
            event_accumulator.HISTOGRAMS: 1,
        },
    )
    accumulator.Reload()
    tags = accumulator.Tags()
    scalars: dict[str, dict[int, float]] = {}
    histograms = list(tags.get("histograms", []))
    alerts = []
    for tag in tags.get("tensors", []):
        plugin = accumulator.SummaryMetadata(tag).plugin_data.plugin_name
        events = accumulator.Tensors(tag)
        if plugin == "histograms":
            histograms.append(tag)
        elif plugin == "text" and tag.split("/", 1)[0] == ALERT_LOG:
            # alert_log/all or alert_log/<scope>/all
            parts = tag.split("/")
            scope = "/".join(parts[1:-1]) or None
            for event in events:
                for line in np.ravel(_value(event.tensor_proto)):
                    text = line.decode() if isinstance(line, bytes) else str(line)
                    try:
                        alert = json.loads(text)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(alert, dict):
                        alerts.append({**alert, "scope": scope})
        elif plugin in ("scalars", ""):
            values = {}
            for event in events:
                value = _value(event.tensor_proto)
                if value.size == 1 and value.dtype.kind in "fiu":
                    values[event.step] = float(value.reshape(()))
            if values:
                scalars[tag] = values
    for tag in tags.get("scalars", []):  # tf.compat.v1-style summaries
        scalars[tag] = {e.step: float(e.value) for e in accumulator.Scalars(tag)}
    alerts.sort(key=lambda a: int(a.get("step", 0)))
    return Run(name, scalars, sorted(histograms), alerts)


def load_runs(log_dir: str) -> list[Run]:
    """Every run under `log_dir`, named by its path relative to `log_dir`.

    Raises:
        ReportError: `log_dir` is missing, or holds no event file.
    """
    return [
        load_run(path, os.path.relpath(path, log_dir))
        for path in run_directories(log_dir)
    ]
