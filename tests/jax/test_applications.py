"""Issue 30 on JAX: keras.applications MobileNetV3Small at 32x32, trained
as a new user would (`tests/scenarios/applications.py`), raises no alert
while healthy (the probe reads the trainer's live state). The 300-step
runs are `benchmarks/bench_alerts.py`."""

from __future__ import annotations

import keras
import pytest

from tests.scenarios.applications import BATCH, application

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow


def test_no_alert_on_a_healthy_mobilenet():
    assert keras.backend.backend() == "jax"
    # The 40 steps' batches only (one epoch, unshuffled: the default 2400
    # samples' first 1280 are the same images; 2 CPU s less to label).
    outcome, levels = application("MobileNetV3Small", 40, samples=40 * BATCH)
    assert outcome.alerts == []
    assert [s.step for s in levels.snapshots] == [0, 10, 20, 30]
    # The probe saw training move: the squeeze-excite ReLUs lose units by
    # design (the fixed dead fraction of 0.25 fired on them).
    dead = levels.snapshots[-1].stat("dead_fraction")
    assert max(dead.values()) > 0.25
