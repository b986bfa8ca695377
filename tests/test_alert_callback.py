import json
import logging
from collections import defaultdict

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_gradmon import (
    AlertChecker,
    GradientAlertCallback,
    GradientAlertError,
    GradientMonitorOptimizer,
)
from keras_gradmon.alerts import ThresholdRule, format_number
from tests.helpers import LOSS, data, mlp
from tests.reference import load_events, scalar_series


def _exploding(every_n_steps=1):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(256, 8)) * 10).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)]
    )
    model.compile(
        GradientMonitorOptimizer(
            keras.optimizers.SGD(0.02),
            every_n_steps=every_n_steps,
            histogram_every_n_steps=None,
        ),
        "mse",
    )
    return model, x, y


def test_stop_action_ends_an_exploding_run(tmp_path, caplog):
    model, x, y = _exploding()
    callback = GradientAlertCallback(
        rules={"explosion": ThresholdRule(warning=1e3, critical=1e5)},
        actions={"critical": "stop"},
        log_dir=str(tmp_path / "alerts"),
        jsonl_path=str(tmp_path / "alerts.jsonl"),
    )
    with caplog.at_level(logging.WARNING, logger="keras_gradmon"):
        history = model.fit(
            x, y, batch_size=32, epochs=20, verbose=0, callbacks=[callback]
        )
    assert len(history.history["loss"]) < 20  # stopped early
    tiers = [a.tier for a in callback.alerts]
    assert tiers[0] == "warning" and "critical" in tiers
    first_critical = next(a for a in callback.alerts if a.tier == "critical")
    # Critical needs two consecutive summaries above 1e5 (critical_patience=2).
    assert first_critical.value > 1e5
    assert history.history["grad_alerts"][-1] == len(callback.alerts)
    assert any("CRITICAL gradient threshold" in r.getMessage() for r in caplog.records)
    lines = (tmp_path / "alerts.jsonl").read_text().splitlines()
    assert [json.loads(line)["tier"] for line in lines] == tiers
    flags = scalar_series(load_events(str(tmp_path / "alerts")), "alerts/explosion")
    assert flags[first_critical.step] == 1.0
    assert 0.0 in flags.values()  # written at every summary, 0 before it fired


def test_raise_action_carries_step_rule_and_value():
    model, x, y = _exploding()
    callback = GradientAlertCallback(
        rules=[ThresholdRule(critical=1e4, critical_patience=1)],
        actions={"critical": "raise"},
    )
    with pytest.raises(GradientAlertError) as raised:
        model.fit(x, y, batch_size=32, epochs=20, verbose=0, callbacks=[callback])
    error = raised.value
    assert error.rule == "threshold" and error.value > 1e4
    assert error.step == callback.alerts[-1].step
    assert f"at step {error.step}" in str(error)


def test_default_rules_catch_the_explosion_by_growth():
    model, x, y = _exploding(every_n_steps=2)
    callback = GradientAlertCallback()
    model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=[callback])
    assert {a.rule for a in callback.alerts} & {"growth", "spike", "nonfinite"}


def test_nonfinite_gradient_is_critical_and_names_the_variable():
    x, y = data(n=16)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1), every_n_steps=1, skip_nonfinite=True
    )
    checker = AlertChecker(optimizer)

    @tf.function
    def step(poison):
        with tf.GradientTape() as tape:
            loss = LOSS(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        grads[3] = grads[3] + tf.where(poison, np.nan, 0.0) * tf.one_hot(1, 3)
        optimizer.apply(grads, model.trainable_variables)

    step(tf.constant(False))
    assert checker.check() == []
    step(tf.constant(True))
    alerts = checker.check()
    assert [(a.rule, a.tier) for a in alerts] == [("nonfinite", "critical")]
    assert alerts[0].details["subjects"] == ["mlp/head/bias"]
    assert alerts[0].value == 3 and alerts[0].step == 1  # NaN * 0 is NaN: all 3
    assert "mlp/head/bias" in alerts[0].message
    assert checker.check() == []  # never again on the same numbers


def test_no_alert_on_a_healthy_run():
    x, y = data(n=512)
    model = mlp()
    model.compile(
        GradientMonitorOptimizer(
            keras.optimizers.Adam(1e-3), every_n_steps=1, histogram_every_n_steps=None
        ),
        LOSS,
    )
    callback = GradientAlertCallback()
    model.fit(x, y, batch_size=16, epochs=10, verbose=0, callbacks=[callback])
    assert int(model.optimizer.iterations.numpy()) == 320
    assert callback.alerts == []


@pytest.mark.parametrize(
    "actions, message",
    [
        ({"fatal": "stop"}, r"`actions` has unknown tier 'fatal'"),
        (
            {"critical": "halt"},
            r"`actions\['critical'\]` must be one of \['log', "
            r"'stop', 'raise'\] or a callable. Received: actions\['critical'\]='halt'",
        ),
        (["stop"], r"`actions` must be a mapping"),
    ],
)
def test_bad_actions_are_rejected_at_construction(actions, message):
    with pytest.raises(ValueError, match=message):
        GradientAlertCallback(actions=actions)


def test_bad_fold_steps_is_rejected_at_construction():
    message = "`fold_steps` must be a positive integer. Received: fold_steps=0"
    with pytest.raises(ValueError, match=f"^{message}$"):
        GradientAlertCallback(fold_steps=0)


def test_callable_action_receives_the_alert():
    model, x, y = _exploding()
    seen = []
    callback = GradientAlertCallback(
        rules=[ThresholdRule(warning=1e3)],
        actions={"warning": seen.append},
        max_per_rule=2,
    )
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[callback])
    assert seen and seen == callback.alerts
    assert len(seen) <= 2


class _LearningRateJump(keras.callbacks.Callback):
    """Multiplies the learning rate by 100 before batch `at`."""

    def __init__(self, at):
        super().__init__()
        self.at = at

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.at:
            rate = self.model.optimizer.learning_rate
            rate.assign(rate * 100.0)


def _diverging_fit(callback, steps=450, jump=150):
    """An MLP regression with SGD(0.01), summaries every step, whose learning
    rate jumps 100x at step `jump`: it diverges to NaN within a few steps."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * 8, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.01), every_n_steps=1, histogram_every_n_steps=None
    )
    model.compile(optimizer, "mse")
    model.fit(
        x, y, batch_size=8, shuffle=False, verbose=0,
        callbacks=[callback, _LearningRateJump(jump)],
    )


def _incidents(alerts):
    """The alerts of each (rule, subject, tier), in order of appearance."""
    grouped = defaultdict(list)
    for alert in alerts:
        grouped[(alert.rule, alert.subject, alert.tier)].append(alert)
    return grouped


def test_a_300_step_divergence_logs_a_few_lines_and_keeps_every_alert(
    tmp_path, caplog
):
    # The jump comes after the rules' 100-step warm-up; about 300 steps of
    # NaN make an incident long enough to fold (its first folded line comes
    # 100 steps in).
    callback = GradientAlertCallback(
        log_dir=str(tmp_path / "alerts"), jsonl_path=str(tmp_path / "alerts.jsonl")
    )
    with caplog.at_level(logging.WARNING, logger="keras_gradmon"):
        _diverging_fit(callback)
    logged = [r.getMessage() for r in caplog.records if r.name == "keras_gradmon"]
    alerts = callback.alerts
    # NaN gradients at every step from the divergence to the end.
    nonfinite = [a.step for a in alerts if a.rule == "nonfinite"]
    assert 150 < nonfinite[0] < 200
    assert nonfinite == list(range(nonfinite[0], 450))
    assert len(logged) <= 10
    # Each incident: its first alert in full, and a closing line that
    # accounts for every repeat.
    for (_, subject, tier), group in _incidents(alerts).items():
        assert group[0].message in logged
        if len(group) > 1:
            worst = format_number(max(a.value for a in group))
            ended = "ended" if group[-1].step < 449 else "was still firing at the end"
            closing = (
                f"{tier.upper()} {group[0].title} of {subject!r} {ended}: "
                f"{len(group)} summaries, steps {group[0].step} to "
                f"{group[-1].step}; worst {group[0].metric} = {worst}"
            )
            assert any(line.startswith(closing) for line in logged), closing
    # Nothing is lost: every alert is a JSON line and an `alerts/<rule>` flag.
    lines = (tmp_path / "alerts.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [a.to_dict() for a in alerts]
    events = load_events(str(tmp_path / "alerts"))
    for rule in callback.checker.engine.rules:
        flags = scalar_series(events, f"alerts/{rule}")
        assert flags.keys() == set(range(450))
        fired = {step for step, flag in flags.items() if flag == 1.0}
        assert fired == {a.step for a in alerts if a.rule == rule}
        assert set(flags.values()) <= {0.0, 1.0}
