"""Shared logs for the dashboard's tests: one real fit (a tiny MLP, every
step, histograms and activations every 5 steps, a threshold rule low enough
to fire), a copy of it under a hostile run name, and damaged runs."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.report.writers import write_simple_values

#: The run named to break a page that writes names as HTML.
HOSTILE = "<img src=x onerror=alert(1)>"
STEPS = 20


def _fit(log_dir: str) -> int:
    import keras

    from keras_gradmon import (
        ActivationMonitorCallback,
        GradientMonitorCallback,
        GradientMonitorOptimizer,
    )
    from keras_gradmon.alerts import ThresholdRule
    from keras_gradmon.alerts.delivery import AlertOptions
    from tests.helpers import LOSS, data, mlp

    x, y = data(64)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1), every_n_steps=1, histogram_every_n_steps=5
    )
    model.compile(optimizer, LOSS)
    # The injected fault: a threshold under the run's gradient norms.
    rule = ThresholdRule(warning=0.5, critical=1.0, critical_patience=1)
    alerts = GradientMonitorCallback(log_dir, alerts=AlertOptions(rules=[rule]))
    activations = ActivationMonitorCallback(x[:32], log_dir=log_dir, every_n_steps=5)
    model.fit(x, y, batch_size=16, epochs=5, verbose=0, callbacks=[alerts, activations])
    return len(alerts.alerts)


@pytest.fixture(scope="session")
def fit_logs(tmp_path_factory):
    """`(log_dir, alerts fired)`: run `fit` and its copy named `HOSTILE`."""
    log_dir = tmp_path_factory.mktemp("dashboard")
    fired = _fit(str(log_dir / "fit"))
    shutil.copytree(log_dir / "fit", log_dir / HOSTILE)
    return log_dir, fired


@pytest.fixture(scope="session")
def bad_logs(fit_logs, tmp_path_factory):
    """Runs `truncated` (the fit's table file cut inside its last record),
    `nonfinite` (per-variable scalars NaN and +Inf at every step),
    `one_step` (one step of per-variable scalars) and `no_gradmon` (a
    Keras loss curve only)."""
    log_dir = tmp_path_factory.mktemp("bad")
    source = fit_logs[0] / "fit"
    os.makedirs(log_dir / "truncated")
    for name in os.listdir(source):
        data = (source / name).read_bytes()
        (log_dir / "truncated" / name).write_bytes(data[: len(data) * 2 // 3])
    nan, inf = float("nan"), float("inf")
    write_simple_values(
        str(log_dir / "nonfinite"),
        {
            "grad_norm/global": {s: nan for s in range(5)},
            "grad_norm/dense/kernel": {s: nan for s in range(5)},
            "grad_norm/dense/bias": {s: inf for s in range(5)},
        },
    )
    write_simple_values(
        str(log_dir / "one_step"),
        {"grad_norm/global": {7: 2.0}, "grad_norm/dense/kernel": {7: 1.5}},
    )
    write_simple_values(str(log_dir / "no_gradmon"), {"epoch_loss": {0: 1.0, 1: 0.5}})
    return log_dir
