"""Alerts of two monitors with event files of their own in one log
directory, both at one step: a gradient monitor and an
`ActivationMonitorCallback` with its own `log_dir`. TensorBoard's Text tab
shows both tables, and the report counts every alert once
(`keras_gradmon.alerts.log.merge_alerts`), read back against TensorBoard's
own reader."""

from __future__ import annotations

import collections
import glob
import json
import os

import keras
import pytest
from tensorboard.util import tensor_util

from keras_gradmon import (
    ActivationMonitorCallback,
    GradientMonitorCallback,
    GradientMonitorOptimizer,
)
from keras_gradmon.alerts import ThresholdRule
from keras_gradmon.alerts.events import Alert
from keras_gradmon.alerts.log import AlertBatch, decode_alerts, merge_alerts
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from keras_gradmon.report.analysis import analyze_run
from keras_gradmon.report.events import load_runs
from tests.helpers import LOSS, data, mlp
from tests.reference import load_events

STEPS = (0, 1, 2)
#: The activation rule fires after 3 summaries out of its band: at the last.
BOTH = 2


def _key(record: dict) -> str:
    return json.dumps(record, sort_keys=True)


@pytest.fixture(scope="module")
def two_monitors(tmp_path_factory):
    """Three steps of `fit`: gradient alerts at each, activation alerts at
    the last, written by two recorders into two event files of one
    directory."""
    log_dir = str(tmp_path_factory.mktemp("two") / "logs")
    x, y = data(n=48)
    model = mlp()
    model.compile(
        GradientMonitorOptimizer(
            keras.optimizers.SGD(0.01), every_n_steps=1, histogram_every_n_steps=None
        ),
        LOSS,
    )
    gradients = GradientMonitorCallback(
        log_dir, alerts={"rules": {"high": ThresholdRule(warning=1e-9)}}
    )
    # Every layer's std lies below this band: an alert per layer and step.
    activations = ActivationMonitorCallback(
        x[:16], log_dir=log_dir, every_n_steps=1, std_band=(1e6, 1e7)
    )
    model.fit(
        x, y, batch_size=16, epochs=1, verbose=0, callbacks=[gradients, activations]
    )
    return log_dir, gradients.alerts, activations.alerts


def test_each_monitor_writes_its_own_event_file_and_alerts_at_each_step(
    two_monitors,
):
    log_dir, gradients, activations = two_monitors
    assert len(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))) == 2
    assert sorted({a.step for a in gradients}) == list(STEPS)
    assert sorted({a.step for a in activations}) == [BOTH]


def test_the_text_tab_shows_both_monitors_tables_at_each_step(two_monitors):
    log_dir, gradients, activations = two_monitors
    events = load_events(log_dir)
    for tag, alerts in (
        ("alert_log/all", gradients),
        ("alert_log/activations", activations),
    ):
        texts = events.Tensors(tag)
        assert [e.step for e in texts] == sorted({a.step for a in alerts}), tag
        for event in texts:
            markdown = tensor_util.make_ndarray(event.tensor_proto).item().decode()
            at_step = [a for a in alerts if a.step == event.step]
            noun = "alert" if len(at_step) == 1 else "alerts"
            heading = f"**{len(at_step)} {noun} at step {event.step}**"
            assert markdown.startswith(heading), (tag, markdown[:80])
            rows = [line for line in markdown.splitlines() if line.startswith("| ")]
            assert len(rows) == 2 + len(at_step)  # the header, its rule, a row each
            tiers = [row.split(" | ")[0][2:] for row in rows[2:]]
            assert tiers == [a.tier.upper() for a in at_step]


def test_tensorboard_holds_both_files_records_and_the_report_counts_each_once(
    two_monitors,
):
    log_dir, gradients, activations = two_monitors
    expected = collections.Counter(
        _key({**a.to_dict(), "scope": None}) for a in [*gradients, *activations]
    )
    events = load_events(log_dir)
    content = events.SummaryMetadata("keras_gradmon/alerts").plugin_data.content
    read = [
        (e.step, decode_alerts(content, tensor_util.make_ndarray(e.tensor_proto)))
        for e in events.Tensors("keras_gradmon/alerts")
    ]
    assert sorted(step for step, _ in read) == sorted((*STEPS, BOTH))  # 2 files
    # The last event of a step alone (what TensorBoard plots) lacks one
    # monitor's alerts; the union of the events has all of them, once.
    last = {step: records for step, records in read}
    assert sum(len(r) for r in last.values()) < sum(expected.values())
    merged = merge_alerts(read)
    assert collections.Counter(map(_key, merged)) == expected
    (run,) = load_runs(log_dir)
    assert collections.Counter(map(_key, run.alerts)) == expected
    assert [a["step"] for a in run.alerts] == sorted(a["step"] for a in run.alerts)
    report = analyze_run(run)
    assert report.counts.total == sum(expected.values())
    assert report.timeline.alerts == sum(expected.values())
    assert not run.unread


def _alert(step: int, subject: str, value: float = 2.0) -> Alert:
    return Alert("threshold", "warning", step, value, 1.0, subject)


def test_a_recorder_repeats_a_step_and_another_recorder_adds_to_it(tmp_path):
    """One recorder writes step 5 twice (its second event repeats the
    first's alert), another writes step 5 once: three alerts, each once,
    however the reader's window cuts the steps."""
    first = TensorBoardRecorder(str(tmp_path))
    first.write_alerts(AlertBatch((_alert(5, "a"),)), 5)
    first.write_alerts(AlertBatch((_alert(5, "b"),)), 5)
    first.close()
    second = TensorBoardRecorder(str(tmp_path))
    second.write_alerts(AlertBatch((_alert(5, "c"),), None, "activations"), 5)
    second.close()
    (run,) = load_runs(str(tmp_path))
    assert sorted(a["subject"] for a in run.alerts) == ["a", "b", "c"]
    events = load_events(str(tmp_path))
    assert len(events.Tensors("keras_gradmon/alerts")) == 3
    (text,) = events.Tensors("alert_log/activations")
    assert "| c |" in tensor_util.make_ndarray(text.tensor_proto).item().decode()


def test_merge_alerts_counts_a_record_as_often_as_one_event_holds_it():
    a, b = {"rule": "x", "step": 1}, {"rule": "y", "step": 1}
    assert merge_alerts([(1, [a, a]), (1, [a]), (1, [a, b])]) == [a, a, b]
    assert merge_alerts([(2, [b]), (1, [a])]) == [a, b]  # by step
    assert merge_alerts([]) == []


def test_a_delivery_names_its_markdown_tag_by_its_source():
    alerts = (_alert(1, "w"),)
    assert AlertBatch(alerts).markdown_tag == "alert_log/all"
    assert AlertBatch(alerts, None, "gradients").markdown_tag == "alert_log/all"
    assert AlertBatch(alerts, "actor", "activations").markdown_tag == (
        "alert_log/actor/activations"
    )
    assert AlertBatch(alerts, "rl").markdown_tag == "alert_log/rl/all"
