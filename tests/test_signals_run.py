"""The new in-step signals end to end, from a real `model.fit`: a spiking
batch between summaries is tracked with its step and skipped, the
update/weight ratio is written per group, the alert names the skipped step,
and `keras-gradmon report` reads them back from the event files."""

from __future__ import annotations

import keras
import numpy as np

from keras_gradmon import (
    GradientAlertCallback,
    GradientMonitorOptimizer,
    GradientSummaryCallback,
)
from keras_gradmon.cli import main
from tests.reference import load_events, scalar_series

SPIKE_STEP = 125


def _fit(log_dir: str) -> GradientAlertCallback:
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2048, 16)).astype("f4")
    y = rng.normal(size=(2048, 1)).astype("f4")
    x[SPIKE_STEP * 8 : SPIKE_STEP * 8 + 8] *= 300.0  # one spiking batch
    model = keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(32, activation="relu", name="hidden"),
            keras.layers.Dense(1, name="head"),
        ]
    )
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3),
        every_n_steps=50,
        track_spikes=True,
        skip_spikes={"window": 32, "min_history": 16},
        groups={"hidden": "hidden/"},
    )
    model.compile(optimizer, "mse")
    alerts = GradientAlertCallback()
    callbacks = [GradientSummaryCallback(log_dir), alerts]
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0, callbacks=callbacks)
    return alerts


def test_a_spiking_batch_is_tracked_skipped_alerted_and_reported(tmp_path, capsys):
    alerts = _fit(str(tmp_path))
    events = load_events(str(tmp_path))
    steps = scalar_series(events, "spikes/max_step")
    assert steps[150] == SPIKE_STEP
    assert scalar_series(events, "spikes/max_norm")[150] > 1000.0
    skipped = scalar_series(events, "skipped/spikes")
    assert [skipped[s] for s in sorted(skipped)] == [0, 0, 0, 1, 1, 1]
    for subject in ("global", "hidden"):
        ratios = scalar_series(events, f"update_ratio/{subject}")
        assert sorted(ratios) == [0, 50, 100, 150, 200, 250]
        assert 1e-4 < ratios[200] < 1e-2
    [alert] = [a for a in alerts.alerts if a.rule == "skipped_spike"]
    assert alert.step == 150 and f"at step {SPIKE_STEP}" in alert.context
    assert main(["report", str(tmp_path), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "largest global norm" in out and f"at step {SPIKE_STEP}" in out
    assert "skipped spiking steps: 1" in out
    assert "update/weight ratio hidden" in out
