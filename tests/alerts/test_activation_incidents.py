"""Activation alerts on the console: a lasting fault is one incident."""

from __future__ import annotations

import json
import logging

import keras
import numpy as np
import pytest

from keras_gradmon import ActivationMonitorCallback
from tests.activations import models
from tests.reference import load_events, scalar_series

STEPS = 300


def _fit(steps, caplog, **options):
    """Trains `models.sequential()` (3 of `h1`'s 8 units dead from the start)
    for `steps` steps with an activation summary at every step, the fixed
    dead-fraction rule at 0.25; returns the callback and the console lines."""
    model = models.sequential()
    model.compile(keras.optimizers.SGD(0.01), "mse")
    x = models.probe_data(steps * 4, seed=3)
    y = np.zeros((len(x), 2), "float32")
    callback = ActivationMonitorCallback(
        models.probe_data(), every_n_steps=1, dead_fraction=0.25, **options
    )
    with caplog.at_level(logging.WARNING, logger="keras_gradmon"):
        model.fit(x, y, batch_size=4, shuffle=False, verbose=0, callbacks=[callback])
    logged = [r.getMessage() for r in caplog.records if r.name == "keras_gradmon"]
    return callback, logged


def test_dead_units_at_every_step_log_a_few_lines_and_keep_every_alert(
    tmp_path, caplog
):
    # The dead-unit rule fires at each of the 300 summaries (a folded line
    # 100 steps in, and a closing one).
    callback, logged = _fit(
        STEPS,
        caplog,
        log_dir=str(tmp_path / "logs"),
        jsonl_path=str(tmp_path / "alerts.jsonl"),
    )
    dead = [a for a in callback.alerts if a.metric == "activation_dead_fraction"]
    own_rules = ("dead_units", "activation_collapse")
    own = [a.step for a in callback.alerts if a.rule in own_rules]
    assert [a.step for a in dead] == list(range(STEPS))
    assert {a.subject for a in dead} == {"seq/h1"}
    assert len(logged) <= 10
    assert dead[0].message in logged
    assert logged[-1].startswith(
        "WARNING activation_dead_fraction threshold of 'seq/h1' was still firing at "
        f"the end: {STEPS} summaries, steps 0 to {STEPS - 1}; worst "
        "activation_dead_fraction = 0.375"
    )
    lines = (tmp_path / "alerts.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        a.to_dict() for a in callback.alerts
    ]
    events = load_events(str(tmp_path / "logs"))
    flags = scalar_series(events, "alerts/dead_fraction")
    assert flags == {step: 1.0 for step in range(STEPS)}
    # Dead from the start, steady: the rules of the layer's own level stay
    # silent, a 0 flag at each summary.
    assert own == []
    for rule in own_rules:
        flags = scalar_series(events, f"alerts/{rule}")
        assert flags == {step: 0.0 for step in range(STEPS)}


#: "<what> of 'h1'" in the folded lines of the dead-unit incident.
H1 = "WARNING activation_dead_fraction threshold of 'seq/h1'"
WORST = "worst activation_dead_fraction = 0.375 at step 0."


@pytest.mark.parametrize(
    ("fold_steps", "folded"),
    [
        # The default (100): no folded line within 60 steps.
        (100, []),
        # 10: a folded line at step 10, then 20 steps later (step 30).
        (
            10,
            [
                f"{H1} goes on: 10 more since the last line, 11 summaries, "
                f"steps 0 to 10; {WORST}",
                f"{H1} goes on: 20 more since the last line, 31 summaries, "
                f"steps 0 to 30; {WORST}",
            ],
        ),
    ],
)
def test_fold_steps_sets_how_the_console_folds_activation_alerts(
    caplog, fold_steps, folded
):
    callback, logged = _fit(60, caplog, std_band=None, fold_steps=fold_steps)
    assert [a.step for a in callback.alerts] == list(range(60))
    assert callback.monitor.delivery.incidents.fold_steps == fold_steps
    assert logged == [
        callback.alerts[0].message,
        *folded,
        f"{H1} was still firing at the end: 60 summaries, steps 0 to 59; {WORST}",
    ]


def test_fold_steps_none_logs_every_activation_alert(caplog):
    callback, logged = _fit(12, caplog, std_band=None, fold_steps=None)
    assert logged == [alert.message for alert in callback.alerts]
    assert len(logged) == 12


@pytest.mark.parametrize("fold_steps", [0, -3, 2.5, "100", True])
def test_bad_fold_steps_is_rejected_at_construction(fold_steps):
    message = (
        f"`fold_steps` must be a positive integer. Received: fold_steps={fold_steps!r}"
    )
    with pytest.raises(ValueError) as error:
        ActivationMonitorCallback(models.probe_data(4), fold_steps=fold_steps)
    assert str(error.value) == message
