"""Issue 30 on a standard architecture: keras.applications MobileNetV3Small
at 32x32, trained as a new user would (`tests/scenarios/applications.py`),
raises no alert while healthy, where the fixed levels of 0.2 raised one on
most layers from step 10 on; and a ReLU layer killed at step 25 (its
BatchNorm offset pushed to -100) is caught at the next activation summary,
step 30, in one console line per rule; the run ends there (31 steps; its
cost is the first step's tracing and compiling). The 300-step runs,
ResNet50V2 and the other architectures are `benchmarks/bench_alerts.py`."""

from __future__ import annotations

import pytest

from keras_gradmon.activations.monitor import activation_metrics
from keras_gradmon.alerts import AlertEngine, default_activation_rules
from tests.scenarios.applications import application, relu_after_norm

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def killed():
    return application("MobileNetV3Small", 31, fault="dead_layer", onset=25)


def test_no_alert_while_healthy_where_the_fixed_levels_fired(killed):
    outcome, levels = killed
    assert outcome.false_alarms == []
    # The fixed levels of 0.2 (std band 0.05 to 20, dead fraction 0.25)
    # would have fired on the same numbers.
    healthy = [s for s in levels.snapshots if s.step < 25]
    assert [s.step for s in healthy] == [0, 10, 20]
    fixed = default_activation_rules(std_band=(0.05, 20.0), dead_fraction=0.25)
    fixed = {name: fixed[name] for name in ("activation_std", "dead_fraction")}
    engine = AlertEngine(fixed)
    fired = [a for s in healthy for a in engine.update(s.step, activation_metrics(s))]
    assert len({a.subject for a in fired}) >= 10


def test_a_killed_layer_is_caught_at_the_next_summary(killed):
    outcome, levels = killed
    layer = relu_after_norm(levels.model)[0]
    first = outcome.first()
    assert (first.step, first.tier) == (30, "warning")
    caught = {(a.rule, a.subject) for a in outcome.alerts if a.step == 30}
    assert ("dead_units", layer) in caught
    # The layers downstream may follow; each rule is one console line.
    opened = [line for line in outcome.lines if "at step 30" in line]
    assert len(opened) == len({rule for rule, _ in caught})
