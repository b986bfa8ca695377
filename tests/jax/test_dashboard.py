"""The dashboard on the logs of Keras 3's `fit` on JAX (written without
TensorFlow): the routes checked on TensorBoard's own reading of the files
and on the report's; and the plugin serving them with TensorFlow blocked,
in a fresh interpreter."""

from __future__ import annotations

import json

import numpy as np
import pytest

from keras_gradmon.report.analysis import analyze
from keras_gradmon.report.events import load_run
from tests.dashboard.client import alerting_fit, get, plugin_client
from tests.jax.processes import run_python
from tests.jax.test_no_tensorflow import _BLOCKED
from tests.reference import histogram_series, load_events, scalar_series

STEPS = 12
VARIABLES = ["mlp/hidden/kernel", "mlp/hidden/bias", "mlp/head/kernel", "mlp/head/bias"]


@pytest.fixture(scope="module")
def jax_logs(tmp_path_factory):
    """`(log_dir, client, events, alerts fired)`; the run is `jax`."""
    log_dir = tmp_path_factory.mktemp("jax_dashboard")
    fired = alerting_fit(str(log_dir / "jax"), 16 * STEPS // 2, every=4, epochs=2)
    return log_dir, plugin_client(log_dir), load_events(str(log_dir / "jax")), fired


def test_heatmap_holds_the_fits_table(jax_logs):
    _, client, events, _ = jax_logs
    code, heat = get(client, "heatmap", run="jax", metric="grad_norm")
    assert code == 200, heat
    assert heat["rows"] == VARIABLES and heat["source"] == "table"
    assert heat["steps"] == list(range(STEPS))
    for row, cells in zip(heat["rows"], heat["values"]):
        expected = scalar_series(events, f"grad_norm/{row}")
        assert dict(zip(heat["steps"], cells)) == pytest.approx(expected, rel=1e-7)


def test_layer_detail_and_health(jax_logs):
    log_dir, client, events, fired = jax_logs
    code, layer = get(client, "layer", run="jax", variable="mlp/hidden/kernel")
    assert code == 200, layer
    want = histogram_series(events, "grad_hist/mlp/hidden/kernel")
    assert [h["step"] for h in layer["histograms"]] == sorted(want) == [0, 4, 8]
    for served in layer["histograms"]:
        np.testing.assert_allclose(served["buckets"], want[served["step"]])
    std = layer["activations"]["std"]
    expected = scalar_series(events, "activation_std/mlp/hidden")
    assert dict(zip(std["steps"], std["values"])) == pytest.approx(expected)
    code, health = get(client, "health", run="jax")
    (report,) = analyze([load_run(str(log_dir / "jax"), "jax")])
    (served,) = health["reports"]
    critical, warning = report.alert_count("critical"), report.alert_count("warning")
    assert critical + warning == fired > 0
    assert served["verdict"].startswith(
        f"{critical} critical and {warning} warning alert(s)"
    )
    assert len(served["incidents"]) == len(report.timeline.incidents) > 0


_SERVE = """
import json, sys
from tests.dashboard.client import alerting_fit, get, plugin_client
client = plugin_client(sys.argv[1])
found = [get(client, "heatmap", run="jax", metric="update_ratio"),
         get(client, "layer", run="jax", variable="mlp/head/kernel"),
         get(client, "health", run="jax")]
print(json.dumps([found, "tensorflow" in sys.modules]))
"""


def test_the_plugin_reads_the_logs_without_tensorflow(jax_logs):
    log_dir, client, _, _ = jax_logs
    out = run_python(["-c", _BLOCKED + _SERVE, str(log_dir)], "jax")
    found, imported = json.loads(out.splitlines()[-1])
    assert not imported
    here = [
        get(client, "heatmap", run="jax", metric="update_ratio"),
        get(client, "layer", run="jax", variable="mlp/head/kernel"),
        get(client, "health", run="jax"),
    ]
    assert [code for code, _ in found] == [200, 200, 200]
    assert [body for _, body in found] == [body for _, body in here]
