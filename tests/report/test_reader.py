"""The report's reader against TensorBoard's `EventAccumulator` on the same
files, value for value, and the bounded store against a full-resolution
read: the same exact numbers and the same verdicts."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from keras_gradmon.alerts.events import Alert
from keras_gradmon.alerts.log import AlertBatch
from keras_gradmon.cli import main
from keras_gradmon.columns import PLUGIN_NAME, Table
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from keras_gradmon.report.accumulator import RunAccumulator
from keras_gradmon.report.analysis import analyze_run
from keras_gradmon.report.events import load_runs
from keras_gradmon.report.records import RecordReader, read_records
from keras_gradmon.report.series import Series
from tests.reference import load_events, scalar_series

STEPS = 60
ROWS = ("dense/kernel", "dense/bias", "out/kernel")
COLUMNS = ("grad_present", "grad_norm", "grad_nonfinite", "update_ratio")


def _table(rng: np.random.Generator, step: int) -> Table:
    values = rng.uniform(0.1, 2.0, (len(ROWS), len(COLUMNS))).astype(np.float32)
    values[:, 0] = 1.0
    values[:, 2] = 0.0
    if step % 7 == 3:
        values[1, 0] = 0.0  # dense/bias without a gradient: no grad_* point
    if step % 11 == 5:
        values[2, 3] = np.nan  # no update ratio (left out where not finite)
    if step == 40:
        values[0, 1:3] = [np.inf, 3.0]
    return Table(ROWS, COLUMNS, values)


def _alerts_record(log_dir: str, step: int) -> None:
    """A record of the new alerts log (plugin keras_gradmon, kind "alerts")."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    writer = EventFileWriter(log_dir, filename_suffix=".alerts")
    summary = summary_pb2.Summary()
    value = summary.value.add(
        tag=f"{PLUGIN_NAME}/alerts",
        tensor=tensor_util.make_tensor_proto(np.zeros([1, 2], np.float32)),
    )
    value.metadata.plugin_data.plugin_name = PLUGIN_NAME
    value.metadata.plugin_data.content = json.dumps({"kind": "alerts"}).encode()
    writer.add_event(event_pb2.Event(step=step, summary=summary))
    writer.close()


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> str:
    """One run of every kind of value the report reads: scalars (a NaN), a
    table a step, histograms every 5 steps, the legacy alert log, the new
    alerts record."""
    log_dir = str(tmp_path_factory.mktemp("reader"))
    rng = np.random.default_rng(0)
    recorder = TensorBoardRecorder(log_dir)
    for step in range(STEPS):
        norm = float("nan") if step == 30 else float(rng.uniform(1, 5))
        recorder.write_scalars(
            {"grad_norm/global": norm, "loss": 1.0 / (step + 1)}, step
        )
        recorder.write_table(_table(rng, step), step)
        if step % 5 == 0:
            buckets = np.array([[0.0, 1.0, 3.0], [1.0, 2.0, 1.0]])
            recorder.write_histograms({"grad_hist/dense/kernel": buckets}, step)
    alert = {"step": 30, "rule": "nonfinite", "tier": "critical", "subject": "g"}
    recorder.write_text("alert_log/all", [json.dumps(alert)], 30)
    recorder.close()
    return log_dir


def test_the_reader_reads_what_tensorboard_reads(logs):
    (run,) = load_runs(logs, max_points=None)
    events = load_events(logs)
    tags = events.Tags()["tensors"]
    plugins = {  # the tables' expanded tags have no metadata of their own
        t: events.raw.summary_metadata[t].plugin_data.plugin_name
        for t in tags
        if t in events.raw.summary_metadata
    }
    scalars = [t for t in tags if plugins.get(t, "scalars") == "scalars"]
    assert sorted(run.scalars) == sorted(scalars)
    for name in scalars:
        expected = scalar_series(events, name)
        assert run.scalars[name].keys() == expected.keys(), name
        np.testing.assert_array_equal(  # NaN and inf included
            [run.scalars[name][s] for s in expected], list(expected.values())
        )
    assert run.histogram_tags == [t for t in tags if plugins.get(t) == "histograms"]
    (text,) = events.Tensors("alert_log/all")
    (line,) = text.tensor_proto.string_val
    assert run.alerts == [{**json.loads(line), "scope": None}]
    assert run.unread == {} and run.damaged == []


def test_an_unreadable_alerts_record_is_counted_and_said(tmp_path, capsys):
    _alerts_record(str(tmp_path), 7)  # floats, and a content of no version
    (run,) = load_runs(str(tmp_path))
    reason = "keras_gradmon/alerts: alerts records that cannot be read"
    assert run.unread == {reason: 1} and run.alerts == []
    assert main(["report", str(tmp_path), "--no-plots"]) == 0
    note = f"WARNING: run {tmp_path.name!r}: 1 value(s) not read: {reason}"
    assert note in capsys.readouterr().out


def test_two_batches_of_one_step_read_as_every_alert_once(tmp_path):
    first = Alert("spike", "warning", 7, 3.5, 2.0, "global")
    second = Alert("threshold", "critical", 7, 9e5, 5e4, "dense/kernel")
    recorder = TensorBoardRecorder(str(tmp_path))
    recorder.write_alerts(AlertBatch((first,)), 7)
    recorder.write_alerts(AlertBatch((second,)), 7)
    recorder.close()
    (run,) = load_runs(str(tmp_path))
    expected = [{**a.to_dict(), "scope": None} for a in (first, second)]
    assert run.alerts == expected and run.unread == {}
    assert Alert.from_dict(run.alerts[1]) == second


def test_the_table_reads_as_its_scalars_at_every_step(logs):
    (run,) = load_runs(logs, max_points=None)
    assert len(run.scalars["grad_norm/dense/bias"]) == STEPS - len(range(3, STEPS, 7))
    assert run.scalars["grad_norm/dense/kernel"][40] == np.inf
    assert 5 not in run.scalars["update_ratio/out/kernel"]


def test_a_cut_file_is_still_reported_with_what_was_read(logs, tmp_path):
    (name,) = [f for f in os.listdir(logs) if f.endswith(".keras_gradmon")]
    with open(os.path.join(logs, name), "rb") as file:
        data = file.read()
    with open(tmp_path / name, "wb") as file:
        file.write(data[: len(data) * 2 // 3])
    (run,) = load_runs(str(tmp_path))
    (found,) = run.damaged
    assert found.damage.truncated and found.damage.path == str(tmp_path / name)
    last = run.stats("grad_norm/global").last[0]
    assert 0 < last < STEPS - 1 and found.steps[1] == last


@pytest.mark.parametrize("cut", [None, 0.5])
def test_records_read_a_small_block_at_a_time_are_the_same(logs, tmp_path, cut):
    (name,) = [f for f in os.listdir(logs) if f.endswith(".keras_gradmon")]
    path = os.path.join(logs, name)
    if cut is not None:
        with open(path, "rb") as file:
            data = file.read()
        path = str(tmp_path / name)
        with open(path, "wb") as file:
            file.write(data[: int(len(data) * cut)])
    whole, damage = read_records(path)
    reader = RecordReader(path, block=64)  # shorter than most records
    assert list(reader) == whole and len(whole) > 50
    assert reader.damage == damage and (damage is None) == (cut is None)


def test_a_bounded_read_of_the_files_states_the_same_exact_numbers(logs):
    (bounded,) = load_runs(logs, max_points=8)
    (full,) = load_runs(logs, max_points=None)
    assert bounded.scalars.keys() == full.scalars.keys()
    for name, series in full.scalars.items():
        assert bounded.stats(name).aggregates == series.aggregates, name
        assert len(bounded.scalars[name]) <= 8


def test_the_series_aggregates_are_numpy_s_over_every_point():
    rng = np.random.default_rng(1)
    steps = np.arange(0, 30_000, 3)
    values = rng.lognormal(size=steps.size)
    values[[100, 5000]] = [np.nan, -np.inf]
    series = Series(max_points=100)
    for step, value in zip(steps.tolist(), values.tolist()):
        series.add(step, value)
    finite = np.isfinite(values)
    peak = int(np.argmax(np.where(finite, values, -np.inf)))
    assert (series.count, series.finite, series.nonfinite) == (10_000, 9998, 2)
    assert (series.high, series.high_step) == (values[peak], steps[peak])
    assert series.low == values[finite].min()
    assert series.last == (29_997, values[-1]) and series.first_step == 0
    assert (series.flagged, series.first_flagged) == (9999, 0)  # -inf is not
    covered = np.maximum(np.diff(steps, prepend=-1), 1).astype(np.float64)
    expected = np.average(values[finite], weights=covered[finite])
    assert series.covered_mean == pytest.approx(expected, rel=1e-12)
    kept, _ = series.kept()
    assert kept.size <= 100 and kept[-1] == 29_997
    # the kept steps are the first of each bucket, whatever the order of adding
    other = Series(max_points=100)
    other.extend(steps[::-1], values[::-1])
    np.testing.assert_array_equal(other.kept()[0], kept)
    firsts = kept[(kept != series.high_step) & (kept != kept[-1])]
    assert np.all(np.diff(firsts // series.width) == 1) and firsts[0] == 0
    assert series.high_step in kept


def _long_run(max_points: int | None):
    """A run far longer than the bound: a layer exploding at step 3000, one
    with NaN gradients from step 4000, clipping, spikes, a growing loss."""
    steps = np.arange(5000)
    rng = np.random.default_rng(2)
    acc = RunAccumulator(max_points)
    grow = np.where(steps < 3000, 1.0, 1e4)
    nan = np.where(steps < 4000, 0.0, 2.0)
    series = {
        "grad_norm/global": rng.uniform(1, 2, steps.size) * grow,
        "grad_norm/a/kernel": rng.uniform(1, 2, steps.size) * grow,
        "grad_norm/b/kernel": rng.uniform(1, 2, steps.size),
        "grad_nonfinite/b/kernel": nan,
        "grad_nonfinite/global": nan,
        "clip/fraction": (steps % 3 == 0).astype(float),
        "spikes/max_norm": rng.uniform(1, 2, steps.size),
        "spikes/max_step": steps + 0.0,
        "update_ratio/global": rng.lognormal(-7, 1, steps.size),
        "epoch_loss": 1.0 / (steps + 1),
    }
    for name, values in series.items():
        acc.add_scalars(name, steps, values)
    return acc.run("long")


def test_a_run_longer_than_the_bound_gets_the_same_verdicts():
    bounded, full = analyze_run(_long_run(256)), analyze_run(_long_run(None))
    verdicts = [(f.layer, f.kind) for f in full.findings]
    assert verdicts == [("b", "non-finite"), ("a", "exploding")]
    assert [(f.layer, f.kind) for f in bounded.findings] == verdicts
    assert bounded.findings[0] == full.findings[0]  # count and first step: exact
    # the peak is kept; the early median is read from the kept points
    for report in (bounded, full):
        assert report.findings[1].reason.endswith("to 20,000 at step 4291")
    approximate = {"median": None, "p99": None}
    assert dataclasses.replace(bounded.norm, **approximate) == dataclasses.replace(
        full.norm, **approximate
    )
    assert bounded.norm.median == pytest.approx(full.norm.median, rel=0.05)
    for field in ("nonfinite_summaries", "clip_fraction", "final_loss", "clip_note"):
        assert getattr(bounded, field) == getattr(full, field), field
    assert bounded.signals.spike == full.signals.spike
    ours, theirs = (
        bounded.signals.update_ratio["global"],
        full.signals.update_ratio["global"],
    )
    assert (ours.low, ours.high, ours.last, ours.summaries) == (
        theirs.low,
        theirs.high,
        theirs.last,
        theirs.summaries,
    )


@pytest.mark.parametrize("bad", [2, 0, 3.5, "64"])
def test_a_bad_bound_is_named_with_the_value_received(bad):
    with pytest.raises(ValueError, match=f"`max_points`.*Received: max_points={bad!r}"):
        RunAccumulator(max_points=bad)
