"""What `keras-gradmon report` says on a newcomer's first runs (issue 29,
section 3): one name per layer, the final loss of a `model.fit` run, and why
a run clipped on every step has no clipping alert."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_gradmon import GradientMonitorOptimizer, GradientSummaryCallback
from keras_gradmon.alerts import ClipFractionRule
from keras_gradmon.alerts.defaults import default_rules
from keras_gradmon.cli import main
from keras_gradmon.formatting import format_number
from keras_gradmon.report.analysis import (
    NO_LOSS,
    analyze,
    analyze_run,
    clip_note,
    layer_names,
)
from keras_gradmon.report.events import Run
from tests.helpers import LOSS, data, mlp
from tests.reference import load_events, scalar_series

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow


def _report(capsys, log_dir) -> str:
    assert main(["report", str(log_dir), "--no-plots"]) == 0
    return capsys.readouterr().out


# One name per layer.


def test_activation_layers_take_the_gradient_layer_names():
    gradient = ["demo_mlp/hidden_1", "demo_mlp/hidden_2", "a/dense", "b/dense"]
    assert layer_names(["hidden_1", "hidden_2", "dense", "other"], gradient) == {
        "hidden_1": "demo_mlp/hidden_1",
        "hidden_2": "demo_mlp/hidden_2",
    }  # "dense" names two layers and "other" none: they keep their names
    assert layer_names(["encoder/dense"], ["model/encoder/dense"]) == {
        "encoder/dense": "model/encoder/dense"
    }
    assert layer_names(["den"], ["m/hidden"]) == {}  # no partial segments


def test_a_run_names_each_layer_once_in_findings_and_timeline():
    dead = {
        "rule": "threshold",
        "tier": "warning",
        "step": 5,
        "value": 0.8,
        "threshold": 0.25,
        "subject": "hidden",
        "metric": "activation_dead_fraction",
        "scope": None,
    }
    scalars = {
        "grad_norm/global": {0: 1.0, 5: 1.0},
        "grad_norm/m/hidden/kernel": {0: 1.0, 5: 1e6},
        "activation_std/hidden": {5: 1e9},
        "activation_dead_fraction/hidden": {5: 0.8},
    }
    report = analyze_run(Run("r", scalars, [], [dead]))
    assert {(f.layer, f.kind) for f in report.findings} == {
        ("m/hidden", "exploding"),
        ("m/hidden", "activation std"),
        ("m/hidden", "dead units"),
    }
    (incident,) = report.timeline.incidents
    assert incident.first.subject == "m/hidden"
    assert report.alerts[0]["subject"] == "hidden"  # the record itself is kept


def test_the_demo_report_names_each_layer_once(demo_logs, capsys):
    out = _report(capsys, demo_logs)
    section = out.split("== no_clipping/train ==")[1]
    findings = section.split("unhealthy layers:\n")[1].split("\n\n")[0]
    layers = {line.split()[0] for line in findings.splitlines()}
    assert layers == {"demo_mlp/head", "demo_mlp/hidden_1", "demo_mlp/hidden_2"}
    assert "dead units" in findings and "activation std" in findings
    row = next(x for x in out.splitlines() if x.startswith("no_clipping/train"))
    assert row.split()[-1] == "3"  # unhealthy layers: 3, not 5


# The final loss of a `model.fit` run.


def _runs(*names_and_scalars) -> list[Run]:
    return [Run(name, scalars, [], []) for name, scalars in names_and_scalars]


def test_the_final_loss_is_read_from_keras_train_run_beside():
    norms = {"grad_norm/global": {0: 1.0, 10: 2.0}}
    runs = _runs(
        ("run1/gradients", norms),
        ("run1/train", {"epoch_loss": {0: 9.0, 1: 4.5}}),
        ("run1/validation", {"epoch_loss": {0: 8.0, 1: 7.0}}),
        ("run2/gradients", norms),
    )
    first, second = (r for r in analyze(runs) if r.run.endswith("gradients"))
    assert first.final_loss == 4.5 and first.loss.run == "run1/train"
    assert first.loss.description == (
        "final loss: 4.5 (Keras's epoch_loss in run run1/train, epoch 2)"
    )
    assert second.final_loss is None and second.loss is None


def test_the_final_loss_is_read_from_keras_train_run_below():
    runs = _runs(
        ("logs", {"grad_norm/global": {0: 1.0}}),
        ("train", {"epoch_loss": {0: 3.0}}),
    )
    (report,) = analyze(runs)
    assert report.final_loss == 3.0 and report.loss.run == "train"


def test_a_run_own_loss_comes_before_one_beside_it():
    runs = _runs(
        ("run1/gradients", {"grad_norm/global": {0: 1.0}, "loss": {10: 2.0}}),
        ("run1/train", {"epoch_loss": {0: 9.0}}),
    )
    (report,) = analyze(runs)
    assert report.final_loss == 2.0 and report.loss.run is None


def test_fit_with_keras_tensorboard_beside_reports_its_final_loss(tmp_path, capsys):
    x, y = data(n=32)
    model = mlp()
    model.compile(GradientMonitorOptimizer(keras.optimizers.SGD(0.05)), LOSS)
    run1 = tmp_path / "run1"
    history = model.fit(
        x,
        y,
        batch_size=16,
        epochs=2,
        verbose=0,
        callbacks=[
            GradientSummaryCallback(str(run1 / "gradients")),  # docs/quickstart.md
            keras.callbacks.TensorBoard(str(run1)),
        ],
    )
    out = _report(capsys, tmp_path)
    written = scalar_series(load_events(str(run1 / "train")), "epoch_loss")
    assert np.float32(history.history["loss"][-1]) == np.float32(written[1])
    loss = format_number(written[1])
    assert f"final loss: {loss} (Keras's epoch_loss in run run1/train, epoch 2)" in out
    row = next(x for x in out.splitlines() if x.startswith("run1/gradients"))
    assert row.split()[1] == loss


def test_a_monitored_run_without_a_loss_says_where_one_comes_from(tmp_path, capsys):
    from tests.report.writers import norms, write_simple_values

    write_simple_values(str(tmp_path / "grads"), norms(range(0, 50, 10)))
    out = _report(capsys, tmp_path)
    assert NO_LOSS in out.splitlines()
    assert NO_LOSS.startswith("final loss: none in the logs")


# A run clipped on every step, and no clipping alert.


def test_the_clip_note_reads_the_default_rule():
    rule = default_rules()["clip_fraction"]
    assert isinstance(rule, ClipFractionRule) and rule.window == 1000
    steps = np.arange(0, 280, 5)
    note = clip_note(1.0, steps, [])
    assert note == (
        "no clip_fraction alert: the default rule warns when more than 50% of "
        "the last 1,000 steps were clipped, and decides only once it has seen "
        "1,000 steps; this run has 276"
    )
    assert clip_note(rule.fraction, steps, []) is None  # not above the rule's
    assert clip_note(1.0, steps, [{"rule": "clip_fraction"}]) is None
    assert clip_note(None, steps, []) is None


def _fires(steps: np.ndarray) -> bool:
    """Whether the default rule warns on summaries at `steps`, all clipped."""
    rule = default_rules()["clip_fraction"]
    return any(rule.update(int(step), {"fraction": 1.0}) for step in steps)


def test_the_clip_note_is_there_exactly_when_the_rule_cannot_decide():
    short = np.arange(0, 1000, 5)  # steps 0 to 995: 996 steps seen
    whole = np.append(short, 999)  # 1,000 steps seen: a whole window
    assert not _fires(short) and "this run has 996" in clip_note(1.0, short, [])
    assert _fires(whole) and clip_note(1.0, whole, []) is None


def test_the_demo_clipped_run_says_why_it_has_no_alert(demo_logs, capsys):
    out = _report(capsys, demo_logs)
    section = out.split("== clipping/train ==")[1].split("\n\n")[0]
    events = load_events(str(demo_logs / "clipping" / "train"))
    covered = max(scalar_series(events, "clip/fraction")) + 1
    line = next(x for x in section.splitlines() if x.startswith("clipping:"))
    assert line == (
        "clipping: 100% of steps clipped (no clip_fraction alert: the default "
        "rule warns when more than 50% of the last 1,000 steps were clipped, "
        f"and decides only once it has seen 1,000 steps; this run has {covered})"
    )
    assert "alerts: none" in section
