"""Activation alerts on the console: a lasting fault is one incident."""

from __future__ import annotations

import json
import logging

import keras
import numpy as np

from keras_gradmon import ActivationMonitorCallback
from tests.activations import models
from tests.reference import load_events, scalar_series

STEPS = 600


def test_dead_units_at_every_step_log_a_few_lines_and_keep_every_alert(
    tmp_path, caplog
):
    # `h1` has 3 of 8 units dead from the start: the dead-unit rule fires at
    # each of the 600 summaries.
    model = models.sequential()
    model.compile(keras.optimizers.SGD(0.01), "mse")
    x = models.probe_data(STEPS * 4, seed=3)
    y = np.zeros((len(x), 2), "float32")
    callback = ActivationMonitorCallback(
        models.probe_data(),
        every_n_steps=1,
        log_dir=str(tmp_path / "logs"),
        jsonl_path=str(tmp_path / "alerts.jsonl"),
    )
    with caplog.at_level(logging.WARNING, logger="keras_gradmon"):
        model.fit(x, y, batch_size=4, shuffle=False, verbose=0, callbacks=[callback])
    logged = [r.getMessage() for r in caplog.records if r.name == "keras_gradmon"]
    dead = [a for a in callback.alerts if a.metric == "activation_dead_fraction"]
    band = [a.step for a in callback.alerts if a.metric == "activation_std"]
    assert [a.step for a in dead] == list(range(STEPS))
    assert {a.subject for a in dead} == {"h1"}
    assert len(logged) <= 10
    assert dead[0].message in logged
    assert logged[-1].startswith(
        "WARNING activation_dead_fraction threshold of 'h1' was still firing at "
        f"the end: {STEPS} summaries, steps 0 to {STEPS - 1}; worst "
        "activation_dead_fraction = 0.375"
    )
    lines = (tmp_path / "alerts.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        a.to_dict() for a in callback.alerts
    ]
    events = load_events(str(tmp_path / "logs"))
    flags = scalar_series(events, "alerts/dead_units")
    assert flags == {step: 1.0 for step in range(STEPS)}
    flags = scalar_series(events, "alerts/activation_std")
    assert band and flags == {step: float(step in band) for step in range(STEPS)}
