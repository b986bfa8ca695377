"""The report's reader on what long and resumed runs write: alerts in
bounded memory with exact counts and incidents, a layer's peak kept when
its variables' series are decimated, rewritten steps and tables that gain a
row, legacy alert lines that are not UTF-8 or have no step, and an LSTM's
cell under its layer's name."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from keras_gradmon.alerts.events import Alert
from keras_gradmon.alerts.incidents import group_alerts
from keras_gradmon.columns import Table
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from keras_gradmon.report.accumulator import RunAccumulator
from keras_gradmon.report.alert_store import AlertStore
from keras_gradmon.report.analysis import analyze_run, layer_names
from keras_gradmon.report.events import load_runs
from keras_gradmon.report.render import run_text
from keras_gradmon.report.series import Series
from tests.doctests import assert_examples_hold
from tests.reference import load_events, scalar_series

SUBJECTS = [f"dense_{i}/kernel" for i in range(10)]


def _stream(steps: int) -> list[dict]:
    """An exploding run: every subject alerts at most steps, with quiet
    gaps (new incidents) that differ by subject, and a critical tier."""
    rng = np.random.default_rng(1)
    records = []
    for step in range(steps):
        for i, subject in enumerate(SUBJECTS):
            if (step // (150 + 10 * i)) % 2 == 0:
                tier = "critical" if step % 7 == 0 else "warning"
                value = float(rng.uniform(1, 100))
                alert = Alert("threshold", tier, step, value, 1.0, subject)
                records.append({**alert.to_dict(), "scope": None})
    return records


def _incidents(incidents) -> list[tuple]:
    return sorted(
        (
            i.first.subject,
            i.first.tier,
            i.first.step,
            i.last.step,
            i.count,
            i.worst.value,
        )
        for i in incidents
    )


@pytest.fixture(scope="module")
def stream() -> list[dict]:
    return _stream(3000)


def test_a_long_alert_stream_is_kept_bounded_with_exact_incidents(stream):
    store = AlertStore(keep=20)
    # Out of order: the second half of the run read first (two files).
    half = len(stream) // 2
    for record in stream[half:] + stream[:half]:
        store.add(record)
    keys = {(r["subject"], r["tier"]) for r in stream}
    assert len(store.kept) == 20 * len(keys) < len(stream) / 20
    counts = store.counts(None)
    assert counts.total == len(stream) and counts.unreadable == 0
    assert counts.not_kept == store.not_kept == len(stream) - len(store.kept)
    for tier in ("warning", "critical"):
        assert counts.tiers[tier] == sum(r["tier"] == tier for r in stream)
    reference = group_alerts([Alert.from_dict(r) for r in stream])
    assert _incidents(counts.incidents) == _incidents(reference)
    timeline = counts.timeline()
    assert timeline.alerts == len(stream)
    assert [i.first.step for i in timeline.incidents] == sorted(
        i.first.step for i in reference
    )


def test_the_report_says_how_many_alert_records_it_did_not_keep(stream):
    accumulator = RunAccumulator(max_alerts=20)
    accumulator.add_alerts(stream)
    run = accumulator.run("long")
    assert len(run.alerts) == 20 * len({(r["subject"], r["tier"]) for r in stream})
    report = analyze_run(run)
    criticals = sum(r["tier"] == "critical" for r in stream)
    assert report.alert_count("critical") == criticals
    assert report.timeline.alerts == len(stream)
    not_kept = len(stream) - len(run.alerts)
    assert any(f"{not_kept:,} alert record(s) not kept" in n for n in run.unread_notes)
    text = run_text(report)
    assert f"alerts ({len(stream):,}):" in text
    assert f"({not_kept:,} alert record(s) not kept whole" in text


def _text_event(log_dir: str, step: int, lines: list[bytes]) -> None:
    writer = EventFileWriter(log_dir, filename_suffix=".legacy")
    summary = summary_pb2.Summary()
    value = summary.value.add(
        tag="alert_log/all",
        tensor=tensor_util.make_tensor_proto(np.array(lines, dtype=object)),
    )
    value.metadata.CopyFrom(text_metadata.create_summary_metadata("", ""))
    writer.add_event(event_pb2.Event(step=step, summary=summary))
    writer.close()


def test_legacy_lines_not_utf8_or_without_a_step_are_counted_not_fatal(tmp_path):
    good = Alert("spike", "warning", 4, 3.0, 2.0, "global").to_dict()
    no_step = {**good, "step": None}
    garbled = b'{"rule": "spike", "step": 4, "subject": "\xff\xfe"}'
    lines = [json.dumps(good).encode(), json.dumps(no_step).encode(), garbled]
    _text_event(str(tmp_path), 4, lines)
    (run,) = load_runs(str(tmp_path))
    assert [a["subject"] for a in run.alerts] == ["global", "\ufffd\ufffd"]
    assert run.unread == {
        "alert_log/all: alert records without a step": 1,
        "alert_log/all: lines that are not UTF-8 (read with U+FFFD)": 1,
    }
    analyze_run(run).timeline  # noqa: B018 (reads: no exception)


def _layer_table(kernel: float, bias: float) -> Table:
    values = np.float32([[1.0, kernel], [1.0, bias]])
    rows = ("seq/dense/kernel", "seq/dense/bias")
    return Table(rows, ("grad_present", "grad_norm"), values)


@pytest.mark.parametrize("layout", ["table", "scalars"])
def test_a_layers_peak_survives_the_bound(tmp_path, layout):
    """A kernel+bias layer over 3,000 steps, 64 points kept per tag: the
    kernel peaks at a step the bias's decimation alone would drop."""
    rng = np.random.default_rng(2)
    kernel = rng.uniform(1, 2, 3000).astype(np.float32)
    bias = rng.uniform(0.1, 0.2, 3000).astype(np.float32)
    kernel[2345] = 50.0
    recorder = TensorBoardRecorder(str(tmp_path))
    for step in range(3000):
        table = _layer_table(kernel[step], bias[step])
        if layout == "table":
            recorder.write_table(table, step)
        else:
            recorder.write_scalars(table.scalars(), step)
    recorder.close()
    (run,) = load_runs(str(tmp_path), max_points=64)
    assert len(run.scalars["grad_norm/seq/dense/bias"]) < 100
    steps, norms = analyze_run(run).layer_norms["seq/dense"]
    layer = np.sqrt(kernel.astype(np.float64) ** 2 + bias.astype(np.float64) ** 2)
    assert steps[np.argmax(norms)] == 2345
    assert norms.max() == pytest.approx(layer.max(), rel=1e-12)
    events = load_events(str(tmp_path))  # TensorBoard's reading, the reference
    assert scalar_series(events, "grad_norm/seq/dense/kernel")[2345] == 50.0


def test_a_step_written_again_reads_as_its_later_value():
    series = Series(max_points=8)
    series.extend(np.arange(100), np.ones(100))
    series.extend(np.array([50, 99]), np.array([7.0, 5.0]))  # a resumed run
    assert series.last == (99, 5.0) and series.last_finite == (99, 5.0)
    assert series[99] == 5.0 and series.rewritten == 2
    assert series.count == 100
    within = Series(max_points=8)
    within.extend(np.array([1, 2, 2]), np.array([1.0, 2.0, 9.0]))
    assert within.high == 9.0 and within.count == 2


def test_a_resumed_run_whose_table_gained_a_row_reads_it(tmp_path):
    first = TensorBoardRecorder(str(tmp_path))
    for step in range(3):
        first.write_table(
            Table(("a/kernel",), ("grad_norm",), np.float32([[1.0]])), step
        )
    first.close()
    second = TensorBoardRecorder(str(tmp_path))
    rows = ("a/kernel", "b/kernel")
    for step in range(3, 6):
        second.write_table(
            Table(rows, ("grad_norm",), np.float32([[2.0], [3.0]])), step
        )
    second.close()
    (run,) = load_runs(str(tmp_path))
    assert run.unread == {}
    assert dict(run.scalars["grad_norm/a/kernel"]) == {
        0: 1.0,
        1: 1.0,
        2: 1.0,
        3: 2.0,
        4: 2.0,
        5: 2.0,
    }
    assert dict(run.scalars["grad_norm/b/kernel"]) == {3: 3.0, 4: 3.0, 5: 3.0}
    rewritten = [n for n in run.unread_notes if "written again" in n]
    assert rewritten == []


def test_an_lstm_cell_reads_under_its_layers_name():
    gradient = [
        "seq/lstm/lstm_cell",
        "seq/out",
        "seq/bi/forward/cell",
        "seq/bi/backward/cell",
    ]
    names = layer_names(["seq/lstm", "seq/out", "seq/bi", "other"], gradient)
    assert names == {"seq/lstm": "seq/lstm/lstm_cell", "seq/out": "seq/out"}


@pytest.mark.parametrize(
    "module",
    [
        "keras_gradmon.report.alert_store",
        "keras_gradmon.report.series",
        "keras_gradmon.report.accumulator",
        "keras_gradmon.recorders.tensorboard",
    ],
)
def test_docstring_examples_hold(module):
    assert_examples_hold(module)
