"""Alerts in TensorBoard: a Markdown table a step in the Text tab, and the
records as a `keras_gradmon/alerts` tensor (`keras_gradmon.alerts.log`),
read back with TensorBoard's own reader and text plugin."""

import html
import json
import re

import keras
import numpy as np
import pytest
from tensorboard.plugin_util import markdown_to_safe_html
from tensorboard.util import tensor_util

from keras_gradmon import GradientMonitorCallback, GradientMonitorOptimizer
from keras_gradmon.alerts import AlertEngine, ThresholdRule, format_number
from keras_gradmon.alerts.delivery import AlertDelivery
from keras_gradmon.alerts.events import Alert
from keras_gradmon.alerts.log import (
    alerts_content,
    alerts_markdown,
    alerts_tag,
    decode_alerts,
)
from keras_gradmon.hub import Hub
from keras_gradmon.recorders.jsonl import JsonlRecorder
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from tests.doctests import assert_examples_hold
from tests.helpers import LOSS, data, mlp
from tests.reference import load_events, scalar_series

# Both fire at every summary: a warning and a critical at each step.
RULES = {
    "low": ThresholdRule(warning=1e-9),
    "high": ThresholdRule(critical=1e-9, critical_patience=1),
}
HEADER = ["tier", "rule", "subject", "value", "threshold", "hint"]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """Three steps of `fit`, a summary and two alerts at each."""
    root = tmp_path_factory.mktemp("fit")
    x, y = data(n=48)
    model = mlp()
    model.compile(
        GradientMonitorOptimizer(
            keras.optimizers.SGD(0.01), every_n_steps=1, histogram_every_n_steps=None
        ),
        LOSS,
    )
    alerts = {"rules": RULES, "jsonl_path": str(root / "alerts.jsonl")}
    callback = GradientMonitorCallback(str(root / "logs"), alerts=alerts)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[callback])
    return callback.alerts, load_events(str(root / "logs")), root


def _cells(markdown: str) -> list[list[str]]:
    """The table rendered as TensorBoard renders it: each row's cell texts."""
    rendered = markdown_to_safe_html(markdown)
    rows = re.findall(r"<tr>(.*?)</tr>", rendered, re.S)
    return [
        [html.unescape(c) for c in re.findall(r"<t[hd]>(.*?)</t[hd]>", row, re.S)]
        for row in rows
    ]


def _by_step(alerts) -> dict[int, list[Alert]]:
    steps: dict[int, list[Alert]] = {}
    for alert in alerts:
        steps.setdefault(alert.step, []).append(alert)
    return steps


def _norms(events, subject: str) -> dict[int, float]:
    # Of "global", and of each variable (read from its table).
    return scalar_series(events, f"grad_norm/{subject}")


def test_each_step_is_one_markdown_table_of_all_its_alerts(fitted):
    alerts, events, _ = fitted
    steps = _by_step(alerts)
    assert sorted(steps) == [0, 1, 2]
    texts = events.Tensors("alert_log/all")
    assert [e.step for e in texts] == [0, 1, 2]  # one event a step
    assert events.SummaryMetadata("alert_log/all").plugin_data.plugin_name == "text"
    for event in texts:
        value = tensor_util.make_ndarray(event.tensor_proto)
        assert value.shape == ()  # one Markdown text, not a table of lines
        markdown = value.item().decode()
        # Both rules, on the global norm and each of the 4 variables.
        heading = f"**10 alerts at step {event.step}**: 5 critical, 5 warning\n"
        assert markdown.startswith(heading)
        rows = [
            [
                alert.tier.upper(),
                "gradient threshold",
                alert.subject,
                format_number(_norms(events, alert.subject)[event.step]),
                "> 1e-09",
                alert.hint,
            ]
            for alert in steps[event.step]
        ]
        assert {row[2] for row in rows} == {
            "global",
            "mlp/hidden/kernel",
            "mlp/hidden/bias",
            "mlp/head/kernel",
            "mlp/head/bias",
        }
        assert _cells(markdown) == [HEADER, *rows]


def test_the_records_tensor_holds_every_alert_field(fitted):
    """What `keras-gradmon report` must read from new logs: its reader
    json-decodes `alert_log` lines, which are Markdown now, so it finds
    these alerts only once it calls `decode_alerts` on this tag."""
    alerts, events, root = fitted
    tag = alerts_tag(None)
    assert tag == "keras_gradmon/alerts" and tag in events.Tags()["tensors"]
    metadata = events.SummaryMetadata(tag)
    assert metadata.plugin_data.plugin_name == "keras_gradmon"
    content = metadata.plugin_data.content
    assert json.loads(content) == {"kind": "alerts", "version": 1, "scope": None}
    tensors = events.Tensors(tag)
    assert [e.step for e in tensors] == [0, 1, 2]
    values = [tensor_util.make_ndarray(e.tensor_proto) for e in tensors]
    read = [record for value in values for record in decode_alerts(content, value)]
    assert read == [{**a.to_dict(), "scope": None} for a in alerts]
    lines = (root / "alerts.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [a.to_dict() for a in alerts]
    assert [(r["step"], r["rule"], r["tier"]) for r in read] == [
        (step, "threshold", tier)
        for step in (0, 1, 2)
        for tier in ("warning", "critical")
        for _ in range(5)
    ]
    for record in read:  # the norm the rules saw is the one written
        norms = _norms(events, record["subject"])
        assert np.float32(record["value"]) == np.float32(norms[record["step"]])
        assert record["threshold"] == 1e-9 and record["comparison"] == ">"


def _alert(step, tier, subject):
    return Alert("threshold", tier, step, 2.0, 1.0, subject, "lower the rate")


def _deliver_twice_at_step_5(tmp_path):
    """Two deliveries on one hub (a gradient and another monitor's alerts,
    one tag scope), both at step 5, then one at step 6."""
    hub = Hub([TensorBoardRecorder(str(tmp_path / "tb"))])
    hub.add(JsonlRecorder(str(tmp_path / "hub.jsonl")))
    engine = AlertEngine({"big": ThresholdRule(warning=1.0)})
    first, second = AlertDelivery(hub=hub), AlertDelivery(hub=hub)
    alerts = [
        _alert(5, "warning", "dense|kernel <b>"),
        _alert(5, "critical", "head_[1]*"),
        _alert(6, "warning", "global"),
    ]
    first.deliver(5, alerts[:1], engine)
    second.deliver(5, alerts[1:2], engine)
    first.deliver(6, alerts[2:], engine)
    hub.close()
    return alerts


def test_a_second_delivery_at_a_step_hides_none_of_the_first(tmp_path):
    from tensorboard import context
    from tensorboard.backend.event_processing import (
        data_provider,
        plugin_event_multiplexer,
    )
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.text import text_plugin

    alerts = _deliver_twice_at_step_5(tmp_path)
    logdir = str(tmp_path / "tb")
    events = load_events(logdir)
    # Each event holds every alert of its step so far; the last one all.
    content = events.SummaryMetadata("keras_gradmon/alerts").plugin_data.content
    read = [
        (e.step, decode_alerts(content, tensor_util.make_ndarray(e.tensor_proto)))
        for e in events.Tensors("keras_gradmon/alerts")
    ]
    dicts = [{**a.to_dict(), "scope": None} for a in alerts]
    assert read == [(5, dicts[:1]), (5, dicts[:2]), (6, dicts[2:])]
    # TensorBoard's text plugin, on its Python reader, shows both events of
    # step 5; the last holds both alerts, each subject as given.
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    plugin = text_plugin.TextPlugin(
        base_plugin.TBContext(
            logdir=logdir,
            multiplexer=multiplexer,
            data_provider=data_provider.MultiplexerDataProvider(multiplexer, logdir),
        )
    )
    shown = plugin.text_impl(context.RequestContext(), ".", "alert_log/all", "", True)
    assert [entry["step"] for entry in shown] == [5, 5, 6]
    cells = re.findall(r"<td>(.*?)</td>", shown[1]["text"], re.S)
    subjects = [html.unescape(c) for c in cells[2::6]]
    assert subjects == ["dense|kernel <b>", "head_[1]*"]
    # A recorder without `write_alerts` gets each delivery's alerts once,
    # as JSON text.
    lines = (tmp_path / "hub.jsonl").read_text().splitlines()
    texts = [json.loads(line) for line in lines if '"text"' in line]
    assert [(t["step"], t["tag"]) for t in texts] == [
        (5, "alert_log/all"),
        (5, "alert_log/all"),
        (6, "alert_log/all"),
    ]
    assert [json.loads(t["text"][0]) for t in texts] == [a.to_dict() for a in alerts]


def test_scoped_alerts_have_their_scope_in_tag_and_content(tmp_path):
    recorder = TensorBoardRecorder(str(tmp_path))
    hub = Hub([recorder])
    delivery = AlertDelivery(hub=hub, tag_scope="actor")
    engine = AlertEngine({"big": ThresholdRule(warning=1.0)})
    delivery.deliver(3, [_alert(3, "critical", "w")], engine)
    hub.close()
    events = load_events(str(tmp_path))
    assert {"alert_log/actor/all", "keras_gradmon/actor/alerts"} <= set(
        events.Tags()["tensors"]
    )
    (event,) = events.Tensors("keras_gradmon/actor/alerts")
    content = events.SummaryMetadata("keras_gradmon/actor/alerts").plugin_data.content
    assert content == alerts_content("actor")
    (record,) = decode_alerts(content, tensor_util.make_ndarray(event.tensor_proto))
    assert record["scope"] == "actor" and record["subject"] == "w"


@pytest.mark.parametrize(
    "subject", ["a|b", "w*_x_*", "`code`", "[l](http://x)", "<script>&amp;", "a\\|b"]
)
def test_a_subject_reads_as_given_in_the_rendered_table(subject):
    alert = Alert("spike", "warning", 7, 3.5, 2.0, subject, "a|hint")
    rows = _cells(alerts_markdown([alert.to_dict()]))
    row = ["WARNING", "gradient spike", subject, "3.5", "> 2", "a|hint"]
    assert rows == [HEADER, row]


def test_the_markdown_names_the_other_subjects_and_the_note():
    alert = Alert(
        "nonfinite",
        "critical",
        4,
        7.0,
        0.0,
        "a",
        details={"subjects": ["a", "b", "c"]},
        comparison=">",
        note="suppressed",
    )
    (_, row) = _cells(alerts_markdown([alert.to_dict()]))
    assert row[2] == "a and 2 more" and row[5] == "[suppressed]"


@pytest.mark.parametrize(
    "content, value, message",
    [
        (b'{"kind": "variables", "version": 1}', [], "not keras_gradmon alerts"),
        (b'{"kind": "alerts", "version": 2}', [], "not keras_gradmon alerts"),
        (b"not json", [], "not keras_gradmon alerts"),
        (alerts_content(None), [b"{"], "not an alert's JSON object: '{'"),
        (alerts_content(None), [b'{"rule": "spike"}'], "not an alert's JSON"),
    ],
)
def test_decode_alerts_refuses_what_it_cannot_read(content, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        decode_alerts(content, np.array(value, dtype=object))


def test_examples_hold():
    assert_examples_hold("keras_gradmon.alerts.log")
