"""The dashboard on a custom training loop's logs, written the documented
way (docs/quickstart.md): `write_summaries(optimizer, writer)` after each
step, `AlertChecker(..., log_dir=...)` for the alerts. Numbers checked on
TensorBoard's own reading of the files and, at step 0, on gradients
recomputed apart from training."""

from __future__ import annotations

import numpy as np
import pytest

from keras_gradmon.report.analysis import analyze
from keras_gradmon.report.events import load_run
from tests.dashboard.client import get, plugin_client
from tests.reference import histogram_series, load_events, scalar_series

STEPS = 12
VARIABLES = ["mlp/hidden/kernel", "mlp/hidden/bias", "mlp/head/kernel", "mlp/head/bias"]


def _custom_loop(log_dir: str) -> tuple[list[np.ndarray], int]:
    """Trains `STEPS` steps; the gradients of the first batch at the initial
    weights (in `VARIABLES` order), and the alerts fired."""
    import keras
    import tensorflow as tf

    import keras_gradmon
    from keras_gradmon.alerts import ThresholdRule
    from tests.helpers import LOSS, data, gradients, mlp

    x, y = data(16 * STEPS)
    model = mlp()
    first = gradients(model, x[:16], y[:16])
    optimizer = keras_gradmon.wrap(
        keras.optimizers.SGD(0.1),
        every_n_steps=2,
        histogram_every_n_steps=4,
        groups={"body": "hidden"},
    )
    writer = tf.summary.create_file_writer(log_dir)
    rule = ThresholdRule(warning=0.5, critical=1.0, critical_patience=1)
    checker = keras_gradmon.AlertChecker(
        optimizer, alerts=keras_gradmon.AlertOptions(rules=[rule]), log_dir=log_dir
    )

    @tf.function(jit_compile=True)
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = LOSS(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    for i in range(STEPS):
        train_step(x[16 * i : 16 * (i + 1)], y[16 * i : 16 * (i + 1)])
        keras_gradmon.write_summaries(optimizer, writer)
        checker.check()
    checker.close()
    writer.flush()
    return first, len(checker.history)


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    """`(log_dir, client, events, first gradients, alerts fired)`; the run
    is `custom`."""
    log_dir = tmp_path_factory.mktemp("custom_loop")
    first, fired = _custom_loop(str(log_dir / "custom"))
    events = load_events(str(log_dir / "custom"))
    return log_dir, plugin_client(log_dir), events, first, fired


def test_heatmap_rows_are_the_variables_with_their_numbers(loop):
    _, client, events, first, _ = loop
    code, heat = get(client, "heatmap", run="custom", metric="grad_norm")
    assert code == 200, heat
    # Model order; the group "body" is no row of the heatmap.
    assert heat["rows"] == VARIABLES
    assert heat["steps"] == list(range(0, STEPS, 2))
    for row, cells in zip(heat["rows"], heat["values"]):
        expected = scalar_series(events, f"grad_norm/{row}")
        assert dict(zip(heat["steps"], cells)) == pytest.approx(expected), row
    # Step 0, recomputed apart from training in float64.
    norms = [np.linalg.norm(np.asarray(g, np.float64)) for g in first]
    assert [cells[0] for cells in heat["values"]] == pytest.approx(norms, rel=1e-5)


def test_layer_detail_holds_the_histograms_over_time(loop):
    _, client, events, _, _ = loop
    code, layer = get(client, "layer", run="custom", variable="mlp/head/kernel")
    assert code == 200, layer
    expected = histogram_series(events, "grad_hist/mlp/head/kernel")
    assert [h["step"] for h in layer["histograms"]] == sorted(expected) == [0, 4, 8]
    for served in layer["histograms"]:
        np.testing.assert_allclose(served["buckets"], expected[served["step"]])
        assert served["dropped"] == 0
    norms = layer["series"]["update_ratio"]
    want = scalar_series(events, "update_ratio/mlp/head/kernel")
    assert dict(zip(norms["steps"], norms["values"])) == pytest.approx(want)


def test_health_holds_the_checkers_alerts(loop):
    log_dir, client, _, _, fired = loop
    code, health = get(client, "health", run="custom")
    assert code == 200, health
    (report,) = analyze([load_run(str(log_dir / "custom"), "custom")])
    (served,) = health["reports"]
    assert served["kind"] == "gradients" and served["status"] == "critical"
    critical, warning = report.alert_count("critical"), report.alert_count("warning")
    assert critical + warning == fired > 0
    assert served["verdict"].startswith(
        f"{critical} critical and {warning} warning alert(s)"
    )
    assert [
        (i["rule"], i["subject"], i["first"], i["count"]) for i in served["incidents"]
    ] == [
        (i.first.rule, i.first.subject, i.first.step, i.count)
        for i in report.timeline.incidents
    ]
    assert health["steps"] == [0, STEPS - 2] and health["nothing_to_draw"] is None
