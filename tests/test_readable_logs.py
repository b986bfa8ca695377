"""Keras's progress bar shows the monitor's numbers readably, and `logs` /
`History` / CSV keep the numbers themselves (issue 29, section 3)."""

from __future__ import annotations

import csv
import math
import pickle

import keras
import numpy as np
import pytest
from keras.src.utils.progbar import Progbar

from keras_gradmon import GradientMonitorOptimizer, GradientSummaryCallback
from keras_gradmon.recorders.keras_logs import KerasLogsRecorder, LogValue
from tests.helpers import LOSS, data, mlp

NORM = 289368569907829479691683563574554263552.0  # the demo's exploded norm


def _progbar_line(capsys, values: list[tuple[str, float]]) -> str:
    """What Keras's progress bar prints for `values`, made as `fit`'s
    `ProgbarLogger` makes it."""
    bar = Progbar(target=2, verbose=1, unit_name="step", stateless_metrics=set())
    bar.update(1, values, finalize=False)
    return capsys.readouterr().out


def test_the_progress_bar_shows_a_huge_norm_and_a_zero_readably(capsys):
    plain = _progbar_line(capsys, [("grad_norm", NORM), ("grad_alerts", 0.0)])
    assert "grad_norm: 289368569907829479691683563574554263552.0000" in plain
    assert "grad_alerts: 0.0000e+00" in plain  # the cause: Keras's .4f / .4e
    shown = _progbar_line(
        capsys, [("grad_norm", LogValue(NORM)), ("grad_alerts", LogValue(0.0))]
    )
    assert "grad_norm: 2.894e+38 " in shown
    assert shown.rstrip().endswith("grad_alerts: 0")


def test_a_log_value_is_the_number_itself():
    value = LogValue(NORM)
    assert value == NORM and float(value) == NORM and isinstance(value, float)
    assert str(value) == str(NORM) and repr(value) == repr(NORM)
    assert f"{value:.2e}" == "2.89e+38" and f"{value}" == str(NORM)
    assert f"{LogValue(40.7337):.4f}" == "40.73"
    assert f"{LogValue(1e-5):.4e}" == "1e-05"
    assert math.isnan(LogValue(math.nan))
    assert pickle.loads(pickle.dumps(value)) == NORM
    assert np.asarray([value]).dtype == np.float64


def test_the_recorder_puts_log_values_into_logs():
    recorder = KerasLogsRecorder({"grad_norm": "grad_norm/global"})
    logs: dict = {}
    recorder.update(logs)
    assert isinstance(logs["grad_norm"], LogValue) and math.isnan(logs["grad_norm"])
    recorder.write_scalars({"grad_norm/global": NORM}, step=5)
    recorder.update(logs)
    assert type(logs["grad_norm"]) is LogValue and logs["grad_norm"] == NORM


def test_fit_shows_the_norm_readably_and_history_and_csv_keep_it(tmp_path, capsys):
    x, y = data(n=32)
    model = mlp()
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.05), every_n_steps=1)
    model.compile(optimizer, LOSS, jit_compile=True)
    history = model.fit(
        x,
        y,
        batch_size=16,
        epochs=1,
        verbose=1,
        callbacks=[
            GradientSummaryCallback(str(tmp_path / "grads")),
            keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
        ],
    )
    norm = history.history["grad_norm"][-1]
    assert type(norm) is LogValue
    assert norm == pytest.approx(optimizer.snapshot().totals["grad_norm"])
    out = capsys.readouterr().out
    assert f"grad_norm: {f'{norm:.4g}'}" in out
    with open(tmp_path / "log.csv") as file:
        assert float(next(csv.DictReader(file))["grad_norm"]) == norm
