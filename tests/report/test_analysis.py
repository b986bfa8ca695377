"""The report's analysis on hand-made runs (no TensorFlow needed)."""

import numpy as np
import pytest

from keras_gradmon.report.analysis import analyze, analyze_run, failing_alerts
from keras_gradmon.report.events import Run


def _run(scalars, alerts=()):
    return Run("r", scalars, [], list(alerts))


def _series(values, every=10):
    return {i * every: float(v) for i, v in enumerate(values)}


def test_norm_summary_is_computed_on_the_finite_values():
    norms = [1.0, 2.0, 3.0, float("nan"), 50.0, 4.0]
    report = analyze_run(_run({"grad_norm/global": _series(norms)}))
    finite = np.array([1.0, 2.0, 3.0, 50.0, 4.0])
    assert report.norm.median == np.median(finite)
    assert report.norm.p99 == pytest.approx(np.percentile(finite, 99))
    assert (report.norm.max, report.norm.peak_step) == (50.0, 40)
    assert (report.norm.summaries, report.norm.first_step, report.norm.last_step) == (
        6,
        0,
        50,
    )


def test_layers_combine_their_variables_as_an_l2_norm():
    scalars = {
        "grad_norm/global": _series([1, 1]),
        "grad_norm/m/d/kernel": _series([3, 6]),
        "grad_norm/m/d/bias": _series([4, 8]),
    }
    report = analyze_run(_run(scalars))
    steps, values = report.layer_norms["m/d"]
    assert steps.tolist() == [0, 10] and values.tolist() == [5.0, 10.0]


def test_exploding_vanishing_and_nonfinite_layers_are_named_with_a_reason():
    ok = [1.0, 1.2, 0.9, 1.1, 1.0, 1.0, 1.1, 0.9]
    scalars = {
        "grad_norm/global": _series(ok),
        "grad_norm/m/fine/kernel": _series(ok),
        "grad_norm/m/other/kernel": _series(ok),
        "grad_norm/m/boom/kernel": _series([1, 1, 2, 10, 100, 500, 300, 200]),
        "grad_norm/m/gone/kernel": _series([1e-3, 1e-5, 1e-7, 1e-8, 1e-9, 0, 0, 0]),
        "grad_norm/m/nan/kernel": _series(ok),
        "grad_nonfinite/m/nan/kernel": _series([0, 0, 0, 4, 0, 2, 0, 0]),
        "grad_nonfinite/m/fine/kernel": _series([0] * 8),
    }
    findings = {
        (f.layer, f.kind): f.reason for f in analyze_run(_run(scalars)).findings
    }
    assert set(findings) == {
        ("m/boom", "exploding"),
        ("m/gone", "vanishing"),
        ("m/nan", "non-finite"),
    }
    assert findings[("m/boom", "exploding")] == (
        "gradient norm grew 500x, from 1 early on to 500 at step 50"
    )
    assert findings[("m/nan", "non-finite")] == (
        "NaN/Inf gradients at 2 summaries, first at step 30"
    )


def test_activation_findings_and_sigmoid_exemption():
    scalars = {
        "activation_std/relu": {0: 1.0, 10: 0.01},
        "activation_dead_fraction/relu": {0: 0.0, 10: 0.5},
        "activation_min/relu": {10: 0.0},
        "activation_max/relu": {10: 3.0},
        "activation_std/sig": {10: 0.2},  # bounded in [0, 1]: no band
        "activation_min/sig": {10: 0.001},
        "activation_max/sig": {10: 0.999},
        "activation_saturated_fraction/sig": {10: 0.8},
    }
    report = analyze_run(_run(scalars))
    assert [(f.layer, f.kind) for f in report.findings] == [
        ("relu", "dead units"),
        ("relu", "activation std"),
        ("sig", "saturated"),
    ]
    assert report.findings[0].reason == (
        "50% of its units output 0 on every probe sample at step 10"
    )


def test_scopes_get_a_report_each_and_their_own_alerts():
    alerts = [
        {"step": 5, "tier": "critical", "rule": "nonfinite", "scope": "actor"},
        {"step": 7, "tier": "warning", "rule": "growth", "scope": "critic"},
    ]
    scalars = {
        "grad_norm/actor/global": _series([1, 2]),
        "grad_norm/critic/global": _series([3, 4]),
        "grad_norm/actor/a/kernel": _series([1, 2]),
        "grad_norm/critic/c/kernel": _series([3, 4]),
    }
    reports = analyze([_run(scalars, alerts)])
    assert [(r.scope, r.norm.max) for r in reports] == [("actor", 2.0), ("critic", 4.0)]
    assert [list(r.layer_norms) for r in reports] == [["a"], ["c"]]
    assert [[a["rule"] for a in r.alerts] for r in reports] == [
        ["nonfinite"],
        ["growth"],
    ]
    assert len(failing_alerts(reports, "warning")) == 2
    assert [a["rule"] for a in failing_alerts(reports, "critical")] == ["nonfinite"]


def test_runs_without_keras_gradmon_tags_are_left_out():
    assert analyze([_run({"epoch_loss": {0: 1.0}})]) == []
