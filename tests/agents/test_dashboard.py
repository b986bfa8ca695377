"""The dashboard on tf-agents logs: a DqnAgent whose wrapped optimizer
writes its summaries inside `agent.train` (the in-graph table of
`keras_gradmon.legacy.graph_writer`), and `RLHealthMonitor`'s `rl/...`
signals and RL alerts in the same run. Numbers checked on gradients
recomputed apart from training, on TensorBoard's own reading of the files,
and on what `keras-gradmon report` reads of them."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.utils import common

from keras_gradmon.report.analysis import analyze
from keras_gradmon.report.events import load_run
from keras_gradmon.report.rl import analyze_rl
from keras_gradmon.rl.monitor import RLHealthMonitor
from tests.agents.helpers import loss_gradients, make_agent, make_batch
from tests.dashboard.client import get, plugin_client
from tests.reference import histogram_series, load_events

STEPS = 6
#: Evaluation returns at steps 0, 1, 2, ...: a collapse from step 1 on.
RETURNS = [200.0, 10.0, 10.0, 10.0]


def _train(log_dir: str) -> tuple[list[dict[str, np.ndarray]], list]:
    """`STEPS` in-graph train steps, then the evaluations of `RETURNS`; the
    gradients of each step (recomputed before it), and the RL alerts."""
    agent, _ = make_agent(True, every_n_steps=1, histogram_every_n_steps=3)
    writer = tf.summary.create_file_writer(log_dir)
    health = RLHealthMonitor(agent, writer=writer)
    train = common.function(agent.train)
    expected = []
    with writer.as_default():
        for step in range(STEPS):
            experience = make_batch(seed=step)
            expected.append(loss_gradients(agent, experience))
            train(experience)
        for step, value in enumerate(RETURNS):
            health.record_evaluation([value], step=step)
    health.close()
    writer.flush()
    return expected, health.history


@pytest.fixture(scope="module")
def dqn(tmp_path_factory):
    """`(log_dir, client, events, gradients per step, RL alerts)`; the run
    is `dqn`."""
    log_dir = tmp_path_factory.mktemp("agents_dashboard")
    expected, alerts = _train(str(log_dir / "dqn"))
    events = load_events(str(log_dir / "dqn"))
    return log_dir, plugin_client(log_dir), events, expected, alerts


def _table(events) -> tuple[dict, dict[int, np.ndarray]]:
    """The in-graph table's names and `{step: [rows, columns]}`, as
    TensorBoard reads them."""
    from tensorboard.util import tensor_util

    (tag,) = events.tables
    values = {
        e.step: tensor_util.make_ndarray(e.tensor_proto)
        for e in events.raw.Tensors(tag)
    }
    return events.tables[tag], values


def test_heatmap_is_the_in_graph_table_in_model_order(dqn):
    _, client, events, expected, _ = dqn
    code, heat = get(client, "heatmap", run="dqn", metric="grad_norm")
    assert code == 200, heat
    names, table = _table(events)
    assert heat["rows"] == names["rows"] == list(expected[0])  # the model's order
    assert heat["source"] == "table" and heat["steps"] == sorted(table)
    assert heat["steps"] == list(range(STEPS))
    column = names["columns"].index("grad_norm")
    for r, cells in enumerate(heat["values"]):
        assert cells == [float(table[s][r, column]) for s in heat["steps"]]
    # The table's numbers are the gradients' norms, recomputed.
    for s, grads in enumerate(expected):
        want = [np.linalg.norm(g.astype(np.float64)) for g in grads.values()]
        assert [cells[s] for cells in heat["values"]] == pytest.approx(want, rel=1e-5)


def test_layer_detail_holds_the_histogram_over_time(dqn):
    _, client, events, expected, _ = dqn
    variable = next(iter(expected[0]))  # the first layer's kernel
    code, layer = get(client, "layer", run="dqn", variable=variable)
    assert code == 200, layer
    want = histogram_series(events, f"grad_hist/{variable}")
    assert [h["step"] for h in layer["histograms"]] == sorted(want) == [0, 3]
    for served in layer["histograms"]:
        np.testing.assert_allclose(served["buckets"], want[served["step"]])
    counts = [sum(b[2] for b in h["buckets"]) for h in layer["histograms"]]
    assert counts == [expected[0][variable].size] * 2  # every element counted
    norms = layer["series"]["grad_norm"]
    assert norms["steps"] == list(range(STEPS))


def test_health_shows_the_rl_verdict_and_incidents(dqn):
    log_dir, client, _, _, alerts = dqn
    run = load_run(str(log_dir / "dqn"), "dqn")
    (gradients,) = analyze([run])  # the RL alerts are not the optimizer's
    (rl,) = analyze_rl([run])
    assert rl.alerts and len(rl.alerts) == len(alerts)
    code, health = get(client, "health", run="dqn")
    assert code == 200, health
    served = {r["kind"]: r for r in health["reports"]}
    assert set(served) == {"gradients", "rl"}
    assert served["gradients"]["title"] == gradients.title
    assert served["gradients"]["incidents"] == []
    got = served["rl"]
    assert got["title"] == rl.title == "dqn [rl]"
    critical, warning = rl.alert_count("critical"), rl.alert_count("warning")
    assert got["verdict"] == f"{critical} critical and {warning} warning alert(s)"
    assert got["status"] == ("critical" if critical else "warning")
    assert [
        (i["rule"], i["subject"], i["first"], i["last"], i["count"])
        for i in got["incidents"]
    ] == [
        (i.first.rule, i.first.subject, i.first.step, i.last.step, i.count)
        for i in rl.timeline.incidents
    ]
    assert [(a.rule, a.step) for a in alerts] == [
        (a["rule"], a["step"]) for a in rl.alerts
    ]
    # The report's RL lines: the evaluation's last numbers.
    assert "evaluation: mean return 10, min 10, max 10, episodes 1" in got["details"]
    assert health["verdict"] == (
        f"{gradients.title}: {served['gradients']['verdict']}; "
        f"{rl.title}: {got['verdict']}"
    )
