"""Every bad input caught at construction, with an error that names the
argument, the value and (for files) the file."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_gradmon
from keras_gradmon import (
    ActivationMonitorCallback,
    GradientAlertCallback,
    GradientMonitorOptimizer,
    GradientSummaryCallback,
    MonitorConfig,
)

PROBE = np.zeros((4, 8), "float32")


def _adam() -> keras.optimizers.Optimizer:
    return keras.optimizers.Adam()


# (what is built, the exception type, a pattern the message must hold)
CASES = {
    "alert cooldown_steps=-1": (
        lambda: GradientAlertCallback(cooldown_steps=-1),
        ValueError,
        r"`cooldown_steps` must be a non-negative integer\. "
        r"Received: cooldown_steps=-1",
    ),
    "alert max_per_rule=0": (
        lambda: GradientAlertCallback(max_per_rule=0),
        ValueError,
        r"`max_per_rule` must be a positive integer\. Received: max_per_rule=0",
    ),
    "alert rules=[42]": (
        lambda: GradientAlertCallback(rules=[42]),
        ValueError,
        r"`rules` must hold `Rule` objects.*Received: rules=\[42\]",
    ),
    "alert jsonl_path=7": (
        lambda: GradientAlertCallback(jsonl_path=7),
        ValueError,
        r"`jsonl_path` must be .*Received: jsonl_path=7",
    ),
    "summary log_dir=123": (
        lambda: GradientSummaryCallback(log_dir=123),
        ValueError,
        r"`log_dir` must be a directory path .*Received: log_dir=123",
    ),
    "summary writer='logs'": (
        lambda: GradientSummaryCallback(writer="logs"),
        ValueError,
        r"`writer` must be a tf\.summary writer.*Received: writer='logs'",
    ),
    "summary recorders=[1]": (
        lambda: GradientSummaryCallback("logs", recorders=[1]),
        ValueError,
        r"`recorders` must hold .*Received: 1",
    ),
    "activation layers='(['": (
        lambda: ActivationMonitorCallback(PROBE, layers="(["),
        ValueError,
        r"`layers` is not a valid regular expression .*Received: layers='\(\['",
    ),
    "activation std_band=(2, 0.5)": (
        lambda: ActivationMonitorCallback(PROBE, std_band=(2, 0.5)),
        ValueError,
        r"`std_band` must be .*Received: std_band=\(2, 0\.5\)",
    ),
    "every_n_steps wrong arity": (
        lambda: MonitorConfig(every_n_steps=lambda step, other: True),
        ValueError,
        r"`every_n_steps` must be callable with exactly one argument",
    ),
    "every_n_steps=10**20": (
        lambda: MonitorConfig(every_n_steps=10**20),
        ValueError,
        r"`every_n_steps` must be a positive integer \(at most 2\*\*63 - 1\).*"
        r"Received: every_n_steps=100000000000000000000",
    ),
    "histogram_every_n_steps=0": (
        lambda: MonitorConfig(histogram_every_n_steps=0),
        ValueError,
        r"Received: histogram_every_n_steps=0",
    ),
    "every_n_steps returns an int tensor": (
        lambda: MonitorConfig(every_n_steps=lambda step: step % 10),
        ValueError,
        r"`every_n_steps` must return a boolean .*not .*int64",
    ),
    "every_n_steps raises": (
        lambda: MonitorConfig(every_n_steps=lambda step: step.missing),
        ValueError,
        r"`every_n_steps` raised AttributeError",
    ),
    "activation every_n_steps returns an int": (
        lambda: ActivationMonitorCallback(PROBE, every_n_steps=lambda step: 1),
        ValueError,
        r"`every_n_steps` must return a boolean",
    ),
    "double wrapping": (
        lambda: GradientMonitorOptimizer(GradientMonitorOptimizer(_adam())),
        ValueError,
        r"`inner_optimizer` is already monitored by keras_gradmon",
    ),
    "wrapping a loss scaler around a monitor": (
        lambda: keras_gradmon.wrap(
            keras.optimizers.LossScaleOptimizer(GradientMonitorOptimizer(_adam()))
        ),
        ValueError,
        r"`optimizer` is already monitored",
    ),
    "wrap a string": (
        lambda: keras_gradmon.wrap("adam"),
        ValueError,
        r"`optimizer` must be a Keras 3 optimizer .*tf_keras.*tf\.compat\.v1"
        r".*Received: optimizer='adam'",
    ),
    "wrap a schedule": (
        lambda: keras_gradmon.wrap(
            keras.optimizers.schedules.ExponentialDecay(1, 2, 0.5)
        ),
        ValueError,
        r"`optimizer` must be a Keras 3 optimizer.*ExponentialDecay",
    ),
    "Keras 3 wrapper given step=": (
        lambda: keras_gradmon.wrap(_adam(), step=tf.Variable(0)),
        ValueError,
        r"`step` is for tf_keras and tf\.compat\.v1\.train optimizers",
    ),
    "name=''": (
        lambda: GradientMonitorOptimizer(_adam(), name=""),
        ValueError,
        r"`name` must be a non-empty string",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_at_construction(case):
    build, error, pattern = CASES[case]
    with pytest.raises(error, match=pattern):
        build()


def _write(path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("name", "text", "pattern"),
    [
        ("empty.yaml", "", r"must be a mapping.*Received: None"),
        ("list.yaml", "- 1\n- 2\n", r"must be a mapping.*Received: \[1, 2\]"),
        ("empty.json", "", r"is not valid JSON.*\(the file is empty\)"),
        ("broken.json", '{"every_n_steps": ', r"is not valid JSON: .* line 1"),
        ("bad.yaml", "every_n_steps: [1,\n", r"is not valid YAML"),
        ("value.yaml", "every_n_steps: 0\n", r"Received: every_n_steps=0.*\(in "),
        ("config.toml", "", r"must end in \.json, \.yaml or \.yml"),
    ],
)
def test_config_file_errors_name_the_file(tmp_path, name, text, pattern):
    path = _write(tmp_path / name, text)
    with pytest.raises(ValueError, match=pattern) as caught:
        MonitorConfig.from_file(path)
    assert path in str(caught.value)


def test_a_monitor_section_beside_other_settings_is_read(tmp_path):
    path = _write(
        tmp_path / "train.yaml",
        "training:\n  epochs: 10\nmonitor:\n  every_n_steps: 7\n"
        "  clipping: {method: global_norm, max_norm: 2.0}\n",
    )
    config = MonitorConfig.from_file(path)
    assert config.every_n_steps == 7
    assert config.clipping == {
        "method": "global_norm",
        "max_norm": 2.0,
        "enabled": True,
    }
    json_path = _write(
        tmp_path / "train.json",
        json.dumps({"monitor": {"every_n_steps": 3}, "data": {"batch": 32}}),
    )
    assert MonitorConfig.from_file(json_path).every_n_steps == 3


def test_a_boolean_callable_frequency_is_accepted_in_the_graph():
    config = MonitorConfig(every_n_steps=lambda step: tf.equal(step % 10, 3))
    optimizer = GradientMonitorOptimizer(_adam(), config=config)
    v = keras.Variable(np.ones(2, "float32"))
    recorded = []
    for _ in range(5):
        optimizer.apply([tf.ones(2)], [v])
        recorded.append(optimizer.snapshot().step)
    assert recorded == [-1, -1, -1, 3, 3]
