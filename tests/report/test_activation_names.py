"""The report reads activation tags named by layer paths (this version) and
by bare layer names (older logs), with and without a tag scope."""

from __future__ import annotations

from keras_gradmon.report.analysis import activation_layers, analyze, scopes
from keras_gradmon.report.events import Run


def _findings(report) -> set[tuple[str, str]]:
    return {(f.layer, f.kind) for f in report.findings}


def test_a_layer_path_is_one_layer_not_a_scope():
    scalars = {
        "grad_norm/global": {0: 1.0, 5: 1.0},
        "grad_norm/m/hidden/kernel": {0: 1.0, 5: 1.0},
        "activation_std/m/hidden": {5: 1e9},
        "activation_dead_fraction/m/hidden": {5: 0.8},
        "alerts/dead_units": {5: 0.0},
    }
    run = Run("r", scalars, [], [])
    assert scopes(run) == [None]
    assert activation_layers(run, None) == ["m/hidden"]
    (report,) = analyze([run])
    assert _findings(report) == {
        ("m/hidden", "activation std"),
        ("m/hidden", "dead units"),
    }


def test_a_scoped_monitor_s_layer_paths():
    scalars = {
        "grad_norm/actor/global": {0: 1.0},
        "activation_std/actor/net/dense": {0: 1e9},
        "activation_std/net/dense": {0: 1.0},  # an unscoped monitor beside it
    }
    run = Run("r", scalars, [], [])
    assert scopes(run) == [None, "actor"]
    assert activation_layers(run, "actor") == ["net/dense"]
    assert activation_layers(run, None) == ["net/dense"]
    reports = {report.scope: report for report in analyze([run])}
    assert _findings(reports["actor"]) == {("net/dense", "activation std")}
    assert _findings(reports[None]) == set()


def test_old_logs_with_bare_names_read_as_before():
    scalars = {
        "activation_std/h1": {0: 1e9},
        "activation_std/q/h2": {0: 1e9},  # a scoped monitor, its flags beside
        "alerts/q/dead_units": {0: 0.0},
        "alerts/rl/entropy_collapse": {0: 0.0},  # RL flags name no scope
    }
    run = Run("r", scalars, [], [])
    assert scopes(run) == [None, "q"]
    assert activation_layers(run, None) == ["h1"]
    assert activation_layers(run, "q") == ["h2"]
