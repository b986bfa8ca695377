"""`TensorBoardRecorder` writes with TensorBoard's own event-file writer: read
back with TensorBoard's reader and the report, equal byte for byte to what
`tf.summary` writes, without TensorFlow, one complete file per recorder."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from keras_gradmon.alerts import Alert
from keras_gradmon.alerts.events import format_number
from keras_gradmon.cli import main
from keras_gradmon.columns import Table
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder, table_metadata
from keras_gradmon.report.events import load_runs
from tests.reference import histogram_series, load_events, scalar_series

STEPS = range(0, 100, 10)
LINES = ["first line", "ünïcode ✓", ""]
PLUGINS = {"hist": "histograms", "scalar": "scalars", "text": "text"}


def _event_files(log_dir) -> list[str]:
    """The event files in the order they were written: by the wall time of
    their last event (their names end in a per-process counter, which sorts
    .10 before .9, and their first event's time is whole seconds)."""
    paths = glob.glob(os.path.join(str(log_dir), "events.out.tfevents.*"))
    return sorted(paths, key=lambda path: _events(path)[-1].wall_time)


def _events(path: str) -> list[event_pb2.Event]:
    """Every event of one file, as written (no read-time migration)."""
    return [event_pb2.Event.FromString(r) for r in RawEventFileLoader(path).Load()]


def _values(log_dir) -> dict[str, list[tuple[int, object]]]:
    """`{tag: [(step, Summary.Value), ...]}` of the one file in `log_dir`."""
    (path,) = _event_files(log_dir)
    found: dict[str, list] = {}
    for event in _events(path):
        for value in event.summary.value:
            found.setdefault(value.tag, []).append((event.step, value))
    return found


def _numbers(seed: int) -> tuple[dict, dict]:
    """`({tag: {step: scalar}}, {tag: {step: [k, 3] rows}})`, random."""
    rng = np.random.default_rng(seed)
    scalars = {
        "grad_norm/global": {s: float(rng.lognormal()) for s in STEPS},
        "grad_norm/dense/kernel": {s: float(rng.normal()) for s in STEPS},
        "clip/fraction": {s: 0.0 for s in STEPS},
    }
    edges = np.sort(rng.normal(size=(len(STEPS), 8)), axis=1)
    rows = {
        s: np.stack([e[:-1], e[1:], rng.integers(0, 50, 7).astype(float)], axis=1)
        for s, e in zip(STEPS, edges)
    }
    return scalars, {"grad_hist/dense/kernel": rows}


def _record(recorder: TensorBoardRecorder, scalars: dict, histograms: dict) -> None:
    for step in STEPS:
        recorder.write_scalars({t: v[step] for t, v in scalars.items()}, step)
        recorder.write_histograms({t: h[step] for t, h in histograms.items()}, step)


def test_values_read_back_exactly_with_tensorboards_reader(tmp_path):
    scalars, histograms = _numbers(0)
    recorder = TensorBoardRecorder(tmp_path)
    _record(recorder, scalars, histograms)
    recorder.write_text("notes/run", LINES, 7)
    recorder.close()

    events = load_events(str(tmp_path))
    for tag, series in scalars.items():
        expected = {s: float(np.float32(v)) for s, v in series.items()}
        assert scalar_series(events, tag) == expected
        assert events.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"
    read = histogram_series(events, "grad_hist/dense/kernel")
    assert sorted(read) == list(STEPS)
    for step, rows in histograms["grad_hist/dense/kernel"].items():
        assert read[step].dtype == np.float64
        np.testing.assert_array_equal(read[step], rows)
    metadata = events.SummaryMetadata("grad_hist/dense/kernel")
    assert metadata.plugin_data.plugin_name == "histograms"
    (text,) = events.Tensors("notes/run")
    assert text.step == 7
    assert [b.decode() for b in tensor_util.make_ndarray(text.tensor_proto)] == LINES
    assert events.SummaryMetadata("notes/run").plugin_data.plugin_name == "text"


def test_every_event_has_its_step_and_wall_time_after_the_file_version(tmp_path):
    start = time.time()
    recorder = TensorBoardRecorder(tmp_path)
    for step in STEPS:
        recorder.write_scalars({"grad_norm/global": 1.0}, step)
    recorder.close()
    (path,) = _event_files(tmp_path)
    first, *events = _events(path)
    assert first.file_version == "brain.Event:2"
    # (TensorFlow's writer, used where TensorFlow is imported, stamps the
    # file-version event in whole seconds.)
    assert int(start) <= first.wall_time <= time.time()
    assert [e.step for e in events] == list(STEPS)
    times = [e.wall_time for e in events]
    assert start <= times[0] and times == sorted(times) and times[-1] <= time.time()


def test_the_report_reads_what_the_recorder_wrote(tmp_path, capsys):
    scalars, histograms = _numbers(1)
    recorder = TensorBoardRecorder(tmp_path / "run")
    _record(recorder, scalars, histograms)
    alert = Alert("spike", "warning", 50, 3.5, 2.0, "global")
    recorder.write_text("alert_log/all", [json.dumps(alert.to_dict())], 50)
    recorder.close()

    (run,) = load_runs(str(tmp_path))
    for tag, series in scalars.items():
        assert run.scalars[tag] == {s: float(np.float32(v)) for s, v in series.items()}
    assert run.histogram_tags == ["grad_hist/dense/kernel"]
    assert [a["message"] for a in run.alerts] == [alert.message]

    assert main(["report", str(tmp_path), "--no-plots"]) == 0
    out = capsys.readouterr().out
    steps, norms = run.series("grad_norm/global")
    header, row = (line for line in out.splitlines() if line.startswith("run  "))
    assert header.split("  ")[1:3] == ["final loss", "median norm"]
    assert re.split(r"\s{2,}", row)[2:5] == [
        format_number(np.median(norms)),
        format_number(np.percentile(norms, 99)),
        f"{format_number(norms.max())} @ {steps[int(np.argmax(norms))]}",
    ]
    assert f"\n  {alert.message}\n" in out


def test_summary_values_equal_tf_summarys_byte_for_byte(tmp_path):
    import tensorflow as tf

    data = np.random.default_rng(2).normal(size=(len(STEPS), 200))
    scalars = np.array([0.1234567, -2.5, 1e-30, 3e38, 1e40, np.nan, -np.inf])
    writer = tf.summary.create_file_writer(str(tmp_path / "tf"))
    with writer.as_default():
        for step, numbers in zip(STEPS, data):
            tf.summary.histogram("hist", numbers, step=step, buckets=11)
            tf.summary.scalar("scalar", scalars[step % len(scalars)], step=step)
            tf.summary.text("text", LINES, step=step)
    writer.close()
    theirs = _values(tmp_path / "tf")

    recorder = TensorBoardRecorder(tmp_path / "ours")
    for step, (_, value) in zip(STEPS, theirs["hist"]):
        rows = tensor_util.make_ndarray(value.tensor)
        recorder.write_histograms({"hist": rows}, step)
        recorder.write_scalars({"scalar": scalars[step % len(scalars)]}, step)
        recorder.write_text("text", LINES, step)
    recorder.close()
    ours = _values(tmp_path / "ours")

    assert sorted(ours) == sorted(theirs) == ["hist", "scalar", "text"]
    for tag in theirs:
        assert [s for s, _ in ours[tag]] == [s for s, _ in theirs[tag]]
        for (_, mine), (_, written) in zip(ours[tag], theirs[tag]):
            assert mine.tensor.SerializeToString() == written.tensor.SerializeToString()
        # The plugin metadata, in the tag's first event (TensorBoard reads it
        # there; tf.summary repeats it in every event).
        first, first_tf = ours[tag][0][1], theirs[tag][0][1]
        assert first.SerializeToString() == first_tf.SerializeToString()
        assert first.metadata.plugin_data.plugin_name == PLUGINS[tag]


def test_a_table_is_one_tensor_a_step_as_tf_summary_writes_it(tmp_path):
    """A per-variable table: a float32 `[rows, columns]` tensor equal byte
    for byte to `tf.summary.write`'s, plugin `keras_gradmon` (no Scalars
    chart) with the names in its first event, read back by TensorBoard and
    by the report as the per-variable scalar tags."""
    import tensorflow as tf

    rng = np.random.default_rng(3)
    rows, columns = ("dense/kernel", "dense/bias"), ("grad_present", "grad_norm")
    tables = {
        step: Table(rows, columns, np.float32([[1, rng.lognormal()], [0, np.nan]]))
        for step in STEPS
    }
    recorder = TensorBoardRecorder(tmp_path / "ours")
    writer = tf.summary.create_file_writer(str(tmp_path / "tf"))
    for step, table in tables.items():
        recorder.write_table(table, step)
        with writer.as_default():
            tf.summary.write(
                table.tag, table.values, step, metadata=table_metadata(table)
            )
    recorder.close()
    writer.close()
    ours, theirs = _values(tmp_path / "ours"), _values(tmp_path / "tf")
    assert list(ours) == list(theirs) == ["keras_gradmon/variables"]
    for (step, mine), (step_tf, written) in zip(ours[table.tag], theirs[table.tag]):
        assert step == step_tf
        assert mine.tensor.SerializeToString() == written.tensor.SerializeToString()
    first, first_tf = ours[table.tag][0][1].metadata, theirs[table.tag][0][1].metadata
    assert first.SerializeToString() == first_tf.SerializeToString()
    assert not ours[table.tag][1][1].HasField("metadata")
    assert json.loads(first.plugin_data.content)["rows"] == list(rows)

    events = load_events(str(tmp_path / "ours"))
    assert events.raw.Tags()["scalars"] == []  # nothing for the Scalars tab
    assert scalar_series(events, "grad_norm/dense/kernel") == {
        s: float(t.values[0, 1]) for s, t in tables.items()
    }
    (run,) = load_runs(str(tmp_path / "ours"))
    assert sorted(run.scalars) == ["grad_norm/dense/kernel"]  # bias: no gradient
    assert run.scalars["grad_norm/dense/kernel"] == scalar_series(
        events, "grad_norm/dense/kernel"
    )


def test_a_table_through_a_tf_summary_writer_reads_back_the_same(tmp_path):
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(tmp_path))
    recorder = TensorBoardRecorder(writer=writer)
    columns = ("grad_present", "grad_norm")
    for step in STEPS:
        values = np.float32([[1, step + 0.5]])
        recorder.write_table(Table(("dense/kernel",), columns, values), step)
    recorder.close()
    writer.flush()
    events = load_events(str(tmp_path))
    assert events.tables["keras_gradmon/variables"]["columns"] == list(columns)
    assert scalar_series(events, "grad_norm/dense/kernel") == {
        s: s + 0.5 for s in STEPS
    }


def test_a_tf_summary_writer_is_still_written_through_tensorflow(tmp_path):
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(tmp_path))
    recorder = TensorBoardRecorder(writer=writer)
    recorder.write_scalars({"grad_norm/global": 0.75}, 3)
    recorder.write_text("notes/run", LINES, 3)
    recorder.close()  # flushes; the writer stays the caller's
    recorder.write_scalars({"grad_norm/global": 0.5}, 4)
    writer.close()
    events = load_events(str(tmp_path))
    assert scalar_series(events, "grad_norm/global") == {3: 0.75, 4: 0.5}
    assert len(_event_files(tmp_path)) == 1


_FRESH_PROCESS = """
import sys

import numpy as np

import keras_gradmon.hub
import keras_gradmon.recorders.console
import keras_gradmon.recorders.jsonl
import keras_gradmon.recorders.keras_logs
import keras_gradmon.writer
from keras_gradmon.histogram_rows import histogram_rows
from keras_gradmon.columns import Table
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder, table_metadata

closed = TensorBoardRecorder(sys.argv[1])
closed.write_scalars({"grad_norm/global": 0.5}, 1)
rows = histogram_rows(np.array([1, 2]), np.array([0.0, 1.0]))
closed.write_histograms({"grad_hist/w": rows}, 1)
closed.write_text("notes/run", ["hello"], 1)
closed.flush()
closed.close()
# Never flushed nor closed: written at interpreter exit.
left_open = TensorBoardRecorder(sys.argv[2])
for step in range(100):
    left_open.write_scalars({"grad_norm/global": float(step)}, step)
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow")
sys.exit(f"TensorFlow was imported: {loaded[:5]}" if loaded else 0)
"""


def test_no_tensorflow_is_imported_to_write_a_log_directory(tmp_path):
    script = tmp_path / "write.py"
    script.write_text(textwrap.dedent(_FRESH_PROCESS))
    closed, left_open = tmp_path / "closed", tmp_path / "open"
    result = subprocess.run(
        [sys.executable, str(script), str(closed), str(left_open)],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    events = load_events(str(closed))
    assert scalar_series(events, "grad_norm/global") == {1: 0.5}
    np.testing.assert_array_equal(
        histogram_series(events, "grad_hist/w")[1], [[0, 0.5, 1], [0.5, 1, 2]]
    )
    assert scalar_series(load_events(str(left_open)), "grad_norm/global") == {
        step: float(step) for step in range(100)
    }


def _two_recorders_in_one_second(log_dir) -> tuple[TensorBoardRecorder, ...]:
    """Two recorders whose files were opened in the same second."""
    for attempt in range(5):
        directory = log_dir / str(attempt)
        pair = TensorBoardRecorder(directory), TensorBoardRecorder(directory)
        for recorder in pair:
            recorder.write_scalars({"grad_norm/global": 0.0}, 0)
        seconds = {os.path.basename(f).split(".")[3] for f in _event_files(directory)}
        if len(seconds) == 1:
            return pair
        for recorder in pair:
            recorder.close()
    pytest.fail("no two files opened in one second in five tries")


def test_two_recorders_on_one_directory_in_one_second_write_two_files(tmp_path):
    first, second = _two_recorders_in_one_second(tmp_path)
    for step in range(1, 50):
        first.write_scalars({"grad_norm/global": float(step)}, step)
        second.write_scalars({"grad_norm/global": -float(step)}, step)
    first.close()
    second.close()
    paths = _event_files(first.log_dir)
    assert len(paths) == 2
    written = []
    for path in paths:
        head, *events = _events(path)
        assert head.file_version == "brain.Event:2"
        assert [e.step for e in events] == list(range(50))
        content = b"".join(e.summary.value[0].tensor.tensor_content for e in events)
        written.append(np.frombuffer(content, np.float32).tolist())
    assert sorted(written) == [[-float(s) for s in range(50)], list(range(50))]


def test_writing_after_close_opens_a_new_self_describing_file(tmp_path):
    recorder = TensorBoardRecorder(tmp_path)
    assert _event_files(tmp_path) == []  # opened on the first write
    recorder.flush()
    recorder.write_scalars({"grad_norm/global": 1.0}, 1)
    assert len(_event_files(tmp_path)) == 1
    recorder.close()
    recorder.close()
    recorder.flush()
    recorder.write_scalars({"grad_norm/global": 2.0}, 2)
    recorder.close()
    paths = _event_files(tmp_path)
    assert len(paths) == 2
    for path, step in zip(paths, (1, 2)):
        (value,) = _events(path)[1].summary.value
        assert _events(path)[1].step == step
        assert value.metadata.plugin_data.plugin_name == "scalars"
    assert scalar_series(load_events(str(tmp_path)), "grad_norm/global") == {
        1: 1.0,
        2: 2.0,
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "Pass exactly one of `log_dir` and `writer`"),
        ({"log_dir": ""}, "`log_dir` must be a directory path"),
        ({"log_dir": 3}, "Received: log_dir=3"),
        ({"writer": "logs"}, "`writer` must be a tf.summary writer"),
    ],
)
def test_bad_arguments_are_refused_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TensorBoardRecorder(**kwargs)
