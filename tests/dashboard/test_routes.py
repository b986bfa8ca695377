"""The dashboard's data routes, through TensorBoard's WSGI app, against real
event files: numbers checked on TensorBoard's own reading of the files
(`tests.reference`) and on the report's (`keras_gradmon.report.events`)."""

from __future__ import annotations

import argparse
import json
import os
import re
import urllib.parse

import numpy as np
import pytest

from keras_gradmon.dashboard.plugin import GradmonLoader
from keras_gradmon.report.analysis import analyze
from keras_gradmon.report.events import load_run
from keras_gradmon.report.render import run_details, summary_rows
from tests.dashboard.client import plugin_client
from tests.dashboard.conftest import HOSTILE, STEPS
from tests.reference import histogram_series, load_events, scalar_series
from tests.report.writers import write_simple_values

PREFIX = "/data/plugin/keras_gradmon/"
VARIABLES = ["mlp/hidden/kernel", "mlp/hidden/bias", "mlp/head/kernel", "mlp/head/bias"]


def _get(client, route: str, **query: str):
    response = client.get(PREFIX + route + "?" + urllib.parse.urlencode(query))
    return response.status_code, response.get_json()


@pytest.fixture(scope="module")
def client(fit_logs):
    return plugin_client(fit_logs[0])


@pytest.fixture(scope="module")
def events(fit_logs):
    return load_events(str(fit_logs[0] / "fit"))


def _number(value) -> float:
    return float(value) if not isinstance(value, str) else float(value.lower())


@pytest.mark.parametrize("metric", ["grad_norm", "update_ratio", "grad_to_weight"])
def test_heatmap_holds_every_step_of_the_table(client, events, metric):
    code, heat = _get(client, "heatmap", run="fit", metric=metric)
    assert code == 200, heat
    assert heat["rows"] == VARIABLES  # model order, not sorted
    assert heat["steps"] == list(range(STEPS))  # all 20, not TensorBoard's 10
    assert heat["source"] == "table" and heat["unreadable"] == 0
    left_out = 0
    for row, cells in zip(heat["rows"], heat["values"]):
        # The cells the report reads (`Table.scalars`), no other: a ratio
        # that is not finite (a bias's weight norm of 0 at step 0) is left
        # out there and shown as not recorded here.
        expected = scalar_series(events, f"{metric}/{row}")
        assert len(expected) >= STEPS - 1
        got = {s: _number(v) for s, v in zip(heat["steps"], cells) if v is not None}
        assert got == pytest.approx(expected, rel=1e-7), row
        left_out += STEPS - len(expected)
    assert heat["nonfinite"] == 0
    assert heat["recorded"] == len(VARIABLES) * STEPS - left_out
    if metric != "grad_norm":
        assert left_out > 0  # the case this test is about is in the run


def test_layer_detail_norms_histograms_and_activations(client, events):
    code, layer = _get(client, "layer", run="fit", variable="mlp/hidden/kernel")
    assert code == 200, layer
    norms = layer["series"]["grad_norm"]
    expected = scalar_series(events, "grad_norm/mlp/hidden/kernel")
    assert dict(zip(norms["steps"], norms["values"])) == pytest.approx(expected)
    histograms = histogram_series(events, "grad_hist/mlp/hidden/kernel")
    assert (
        [h["step"] for h in layer["histograms"]] == sorted(histograms) == [0, 5, 10, 15]
    )
    for served in layer["histograms"]:
        np.testing.assert_allclose(served["buckets"], histograms[served["step"]])
    std = layer["activations"]["std"]
    expected = scalar_series(events, "activation_std/mlp/hidden")
    assert dict(zip(std["steps"], std["values"])) == pytest.approx(expected)
    # The head's variables are not the hidden layer's: no activations of it.
    code, head = _get(client, "layer", run="fit", variable="mlp/head/bias")
    assert code == 200 and head["activations"] == {}


def test_health_is_the_reports_verdict(client, fit_logs):
    log_dir, fired = fit_logs
    code, health = _get(client, "health", run="fit")
    assert code == 200, health
    (report,) = analyze([load_run(str(log_dir / "fit"), "fit")])
    (served,) = health["reports"]
    assert served["status"] == "critical"
    assert served["verdict"].startswith(
        f"{report.alert_count('critical')} critical and "
        f"{report.alert_count('warning')} warning alert(s)"
    )
    assert report.alert_count("critical") + report.alert_count("warning") == fired
    incidents = report.timeline.incidents
    assert len(served["incidents"]) == len(incidents) > 0
    for got, want in zip(served["incidents"], incidents):
        assert (got["rule"], got["subject"], got["tier"]) == (
            want.first.rule,
            want.first.subject,
            want.first.tier,
        )
        assert (got["first"], got["last"], got["count"]) == (
            want.first.step,
            want.last.step,
            want.count,
        )
        assert got["worst"] == pytest.approx(want.worst.value)
        assert got["hint"] and got["text"]
    assert health["steps"] == [0, STEPS - 1]
    # The report's own lines and comparison row: norm, clipping, skipped
    # steps, signals, final loss, dropped steps.
    assert served["details"] == run_details(report)
    assert served["details"][0].startswith("global gradient norm: median")
    header, row = summary_rows([report])
    assert served["summary"] == dict(zip(header[1:], row[1:]))
    assert served["summary"]["alerts W/C"] == (
        f"{report.alert_count('warning')}/{report.alert_count('critical')}"
    )
    assert health["sample"] is None and health["unread"] == []


def test_more_steps_than_tensorboard_serves_say_it_is_a_sample(fit_logs):
    """`--samples_per_plugin keras_gradmon=5` on a run of 20 steps: 5 steps
    read, and the heatmap and health line say they are a sample."""
    sampled = plugin_client(fit_logs[0], {"keras_gradmon": 5})
    code, heat = _get(sampled, "heatmap", run="fit", metric="grad_norm")
    assert code == 200 and len(heat["steps"]) == 5 and heat["steps"][-1] == STEPS - 1
    assert heat["sample"].startswith(
        "A sample: 1 tag(s) were read at the most steps TensorBoard serves per "
        f"tag, and may hold more (keras_gradmon/variables: 5 steps read of steps "
        f"{heat['steps'][0]} to {STEPS - 1}; TensorBoard serves 5 per tag of "
        "keras_gradmon"
    )
    assert "`keras-gradmon report <logdir>` reads every step" in heat["sample"]
    code, health = _get(sampled, "health", run="fit")
    assert code == 200 and health["sample"].startswith("A sample: 2 tag(s)")


def test_runs_list_the_hostile_name_as_it_is(client):
    code, runs = _get(client, "runs")
    assert code == 200 and runs["runs"] == sorted(["fit", HOSTILE])
    code, heat = _get(client, "heatmap", run=HOSTILE, metric="grad_norm")
    assert code == 200 and heat["run"] == HOSTILE


@pytest.mark.parametrize(
    ("route", "query", "code", "says"),
    [
        ("heatmap", {"run": "../fit", "metric": "grad_norm"}, 400, "'..'"),
        ("heatmap", {"run": "fit/../..", "metric": "grad_norm"}, 400, "'..'"),
        ("heatmap", {"run": "nope", "metric": "grad_norm"}, 404, "'nope'"),
        ("heatmap", {"run": "fit", "metric": "loss"}, 404, "metric"),
        ("heatmap", {"metric": "grad_norm"}, 400, "`run` is required"),
        ("layer", {"run": "fit", "variable": "../../etc/passwd"}, 400, "'..'"),
        ("layer", {"run": "fit", "variable": "mlp/nothing"}, 404, "mlp/nothing"),
        ("health", {"run": "..\\fit"}, 400, "'..'"),
    ],
)
def test_bad_names_get_a_json_error(client, route, query, code, says):
    got, body = _get(client, route, **query)
    assert got == code and says in body["error"], body


@pytest.fixture(scope="module")
def bad_client(bad_logs):
    return plugin_client(bad_logs)


def test_a_truncated_run_shows_what_was_read(bad_client, bad_logs, fit_logs):
    code, heat = _get(bad_client, "heatmap", run="truncated", metric="grad_norm")
    assert code == 200, heat
    assert 0 < len(heat["steps"]) < STEPS  # the steps before the cut
    assert heat["steps"] == list(range(len(heat["steps"])))
    full = load_events(str(fit_logs[0] / "fit"))
    for row, cells in zip(heat["rows"], heat["values"]):
        expected = scalar_series(full, f"grad_norm/{row}")
        assert [_number(v) for v in cells] == pytest.approx(
            [expected[s] for s in heat["steps"]]
        )
    code, health = _get(bad_client, "health", run="truncated")
    assert code == 200 and health["steps"] == [0, heat["steps"][-1]]


def test_a_run_of_nonfinite_numbers_says_so(bad_client, bad_logs):
    code, heat = _get(bad_client, "heatmap", run="nonfinite", metric="grad_norm")
    assert code == 200, heat
    assert heat["source"] == "scalars" and heat["steps"] == [0, 1, 2, 3, 4]
    cells = dict(zip(heat["rows"], heat["values"]))
    assert cells == {"dense/kernel": ["NaN"] * 5, "dense/bias": ["Infinity"] * 5}
    assert heat["nonfinite"] == 10
    code, layer = _get(bad_client, "layer", run="nonfinite", variable="dense/bias")
    assert code == 200 and layer["series"]["grad_norm"]["values"] == ["Infinity"] * 5
    code, health = _get(bad_client, "health", run="nonfinite")
    assert code == 200, health
    # The report's verdict on the same files, word for word: it reads no
    # finite norm (and these old logs hold no `grad_nonfinite` count).
    (report,) = analyze([load_run(str(bad_logs / "nonfinite"), "nonfinite")])
    (served,) = health["reports"]
    assert health["verdict"] == f"nonfinite: {served['verdict']}"
    assert served["details"] == run_details(report) == []
    assert (
        served["summary"]["median norm"] == "-" == served["summary"]["max norm @ step"]
    )
    # What the report does not say, the dashboard does: 10 cells NaN or Inf.
    assert health["nonfinite_cells"] == 10


def test_a_route_that_fails_answers_json(bad_client):
    """TensorBoard's own reader raises on a tensor of 3 bytes: the routes
    that read it answer a JSON 500 naming the error, the others still work;
    a table of strings is counted as unreadable."""
    for route in ("heatmap", "health"):
        code, body = _get(bad_client, route, run="short_tensor", metric="grad_norm")
        assert code == 500, body
        assert body["error"].startswith(f"/data/plugin/keras_gradmon/{route}?run=")
        assert (
            "ValueError: buffer size must be a multiple of element size"
            in (body["error"])
        )
    code, runs = _get(bad_client, "runs")
    assert code == 200 and "short_tensor" in runs["runs"]
    code, heat = _get(bad_client, "heatmap", run="text_table", metric="grad_norm")
    assert code == 200 and heat["unreadable"] == 1 and heat["rows"] == [], heat


def test_a_one_step_run(bad_client):
    code, heat = _get(bad_client, "heatmap", run="one_step", metric="grad_norm")
    assert code == 200 and heat["steps"] == [7]
    assert heat["rows"] == ["dense/kernel"] and heat["values"] == [[1.5]]
    code, health = _get(bad_client, "health", run="one_step")
    assert code == 200 and health["steps"] == [7, 7]
    assert health["reports"][0]["details"][0] == (
        "global gradient norm: median 2, p99 2, max 2 at step 7 (1 summaries, "
        "steps 7-7)"
    )


def test_a_run_without_keras_gradmon_data_says_so(bad_client):
    code, health = _get(bad_client, "health", run="no_gradmon")
    assert code == 200 and health["reports"] == [], health
    assert health["nothing_to_draw"] == (
        "This run holds no keras_gradmon data the dashboard can draw (no "
        "per-variable numbers, no gradient norms, no RL health signals, no "
        "alerts); it holds 1 other scalar tag(s) (epoch_loss) and 0 histogram "
        "tag(s)."
    )
    code, heat = _get(bad_client, "heatmap", run="no_gradmon", metric="grad_norm")
    assert code == 200 and heat["rows"] == [] and heat["source"] == ""
    # A run with numbers to draw says nothing of the kind.
    code, health = _get(bad_client, "health", run="one_step")
    assert code == 200 and health["nothing_to_draw"] is None


def test_the_page_files_are_served_from_the_package(client):
    script = client.get(PREFIX + "index.js")
    assert script.status_code == 200 and script.mimetype == "text/javascript"
    assert b"export async function render" in script.data
    # Names are set as text only: no HTML parsed from strings, no handler
    # attribute (`on...`) set, and `setAttribute` only in the one helper
    # that refuses those.
    for sink in (b"innerHTML", b"outerHTML", b"insertAdjacentHTML", b"document.write"):
        assert sink not in script.data, sink
    assert re.findall(rb"\bon[a-z]+\s*[:=]\s*[\"'`]", script.data) == []
    assert re.findall(rb"[\"'`]on[a-z]+[\"'`]\s*:", script.data) == []
    assert script.data.count(b"setAttribute(") == 1
    assert b"if (/^on/i.test(k)) throw" in script.data
    assert client.get(PREFIX + "style.css").mimetype == "text/css"
    for text in (script.data, client.get(PREFIX + "style.css").data):
        assert b"http://" not in text.replace(b"http://www.w3.org/2000/svg", b"")
        assert b"https://" not in text


def _installed_from(distribution) -> str:
    """The directory the installed metadata was built from."""
    direct = json.loads(distribution.read_text("direct_url.json") or "{}")
    if direct.get("url", "").startswith("file://"):
        return os.path.realpath(urllib.parse.urlparse(direct["url"]).path)
    return os.path.dirname(os.path.realpath(distribution.locate_file("keras_gradmon")))


def test_the_entry_point_is_declared():
    from importlib import metadata

    import keras_gradmon
    from keras_gradmon.dashboard.plugin import GradmonLoader

    try:
        distribution = metadata.distribution("keras-gradmon")
    except metadata.PackageNotFoundError:
        pytest.skip("keras-gradmon is not installed (only importable from source)")
    here = os.path.dirname(os.path.dirname(os.path.realpath(keras_gradmon.__file__)))
    installed = _installed_from(distribution)
    if installed != here:
        pytest.skip(
            f"the installed keras-gradmon metadata is another checkout's "
            f"({installed}, not {here}); `pip install -e .` here declares it"
        )
    points = [e for e in distribution.entry_points if e.group == "tensorboard_plugins"]
    assert [(e.name, e.value) for e in points] == [
        ("keras_gradmon", "keras_gradmon.dashboard.plugin:GradmonLoader")
    ]
    assert points[0].load() is GradmonLoader


def test_old_logs_rows_are_variables_in_model_order(tmp_path):
    """Per-variable scalars without a table, an unscoped and a scoped
    optimizer with groups: a row per variable in the order written (not
    sorted), no `<scope>/global` or group row; the tab is enabled."""
    series = {
        "grad_norm/global": {0: 3.0, 1: 4.0},
        "grad_norm/critic/global": {0: 5.0, 1: 6.0},
        "grad_norm/critic/body": {0: 2.0, 1: 2.5},
        "grad_norm/body": {0: 1.0, 1: 1.5},
        "grad_norm/zeta/kernel": {0: 0.5, 1: 0.25},
        "grad_norm/alpha/bias": {0: 0.0, 1: 0.0},
        "grad_norm/critic/q/kernel": {0: 7.0, 1: 8.0},
    }
    write_simple_values(str(tmp_path / "old"), series)
    old = plugin_client(tmp_path)
    code, heat = _get(old, "heatmap", run="old", metric="grad_norm")
    assert code == 200 and heat["source"] == "scalars", heat
    assert heat["rows"] == ["zeta/kernel", "alpha/bias", "critic/q/kernel"]
    assert heat["values"] == [[0.5, 0.25], [0.0, 0.0], [7.0, 8.0]]
    listing = old.get("/data/plugins_listing").get_json()
    assert listing["keras_gradmon"]["enabled"] is True


def test_the_loader_samples_only_its_own_plugin():
    flags = argparse.Namespace(samples_per_plugin="text=50, scalars=7")
    GradmonLoader().fix_flags(flags)
    assert flags.samples_per_plugin == {"text": 50, "scalars": 7, "keras_gradmon": 1000}
    flags = argparse.Namespace(samples_per_plugin={})
    GradmonLoader().fix_flags(flags)
    assert flags.samples_per_plugin == {"keras_gradmon": 1000}  # text: TB's 10


def test_a_variable_with_nonfinite_gradients_is_a_nonfinite_cell(tmp_path):
    """A norm is of the finite elements only (`grad_nonfinite` counts the
    rest): where the count is above 0 the cell says NaN/Inf, not the norm of
    what was left (0 for a gradient of NaNs and zeros)."""
    from keras_gradmon.columns import Table
    from keras_gradmon.recorders.tensorboard import TensorBoardRecorder

    columns = ("grad_present", "grad_norm", "grad_nonfinite", "weight_norm",
               "weight_nonfinite", "grad_to_weight")
    recorder = TensorBoardRecorder(str(tmp_path / "nan"))
    for step, (norm, bad) in enumerate([(2.0, 0.0), (0.0, 273.0)]):
        values = np.array([[1.0, norm, bad, 4.0, 0.0, norm / 4.0]], np.float32)
        recorder.write_table(Table(("dense/kernel",), columns, values), step)
    recorder.close()
    client = plugin_client(tmp_path)
    for metric, expected in [("grad_norm", [2.0, "NaN"]), ("weight_norm", [4.0, 4.0]),
                             ("grad_to_weight", [0.5, "NaN"])]:
        code, heat = _get(client, "heatmap", run="nan", metric=metric)
        assert code == 200 and heat["values"] == [expected], heat
