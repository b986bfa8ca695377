"""The older spellings keep working for one release, each with a
`DeprecationWarning` that names its replacement: `GradientSummaryCallback`,
`GradientAlertCallback`, an `ActivationOptions` as the first argument of the
activation callback, and `options=` (all in one small fit). And a missing
probe batch is a ValueError that says what `data` must be."""

from __future__ import annotations

import types
import warnings

import keras
import numpy as np
import pytest

from keras_gradmon import (
    ActivationMonitor,
    ActivationMonitorCallback,
    ActivationOptions,
    GradientAlertCallback,
    GradientMonitorOptimizer,
    GradientSummaryCallback,
)
from tests.helpers import LOSS, data, mlp
from tests.reference import load_events, scalar_series

STEPS = {0, 1, 2, 3}


def _made(make):
    """`make()`, and the DeprecationWarnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = make()
    return made, [w for w in caught if w.category is DeprecationWarning]


def _hidden_std(weights, probe) -> float:
    kernel, bias = (w.astype(np.float64) for w in weights[:2])
    return float(np.maximum(probe.astype(np.float64) @ kernel + bias, 0.0).std())


@pytest.fixture(scope="module")
def old(tmp_path_factory):
    """One fit with every deprecated callback spelling."""
    root = tmp_path_factory.mktemp("deprecated")
    dirs = {name: str(root / name) for name in ("summary", "alerts", "first", "kw")}
    x, y = data(n=64)
    probe = x[:16]
    model = mlp()
    initial = model.get_weights()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.05), every_n_steps=1, histogram_every_n_steps=None
    )
    model.compile(optimizer, LOSS, jit_compile=True)
    made = {
        "summary": _made(lambda: GradientSummaryCallback(dirs["summary"])),
        "alerts": _made(
            lambda: GradientAlertCallback(
                actions={"critical": "stop"}, log_dir=dirs["alerts"]
            )
        ),
        "first": _made(
            lambda: ActivationMonitorCallback(
                ActivationOptions(data=probe, every_n_steps=2, log_dir=dirs["first"])
            )
        ),
        "kw": _made(
            lambda: ActivationMonitorCallback(
                options=ActivationOptions(
                    data=probe, every_n_steps=2, log_dir=dirs["kw"]
                )
            )
        ),
    }
    history = model.fit(
        x, y, batch_size=16, epochs=1, shuffle=False, verbose=0,
        callbacks=[callback for callback, _ in made.values()],
    )
    events = {name: load_events(path) for name, path in dirs.items()}
    return types.SimpleNamespace(
        made=made,
        events=events,
        history=history,
        optimizer=optimizer,
        initial=initial,
        probe=probe,
    )


@pytest.mark.parametrize(
    "name, old_spelling, replacement",
    [
        ("summary", "GradientSummaryCallback is deprecated",
         "use GradientMonitorCallback(log_dir, alerts=False) instead"),
        ("alerts", "GradientAlertCallback is deprecated",
         "use GradientMonitorCallback(alerts=AlertOptions(...)) instead"),
        ("first", "ActivationMonitorCallback(ActivationOptions(...)) is deprecated",
         "pass the options as ActivationMonitorCallback(data, config=...)"),
        ("kw", "ActivationMonitorCallback(options=...) is deprecated",
         "pass the options as ActivationMonitorCallback(data, config=...)"),
    ],
)  # fmt: skip
def test_each_warns_once_naming_its_replacement(old, name, old_spelling, replacement):
    _, caught = old.made[name]
    assert len(caught) == 1
    message = str(caught[0].message)
    assert old_spelling in message and replacement in message
    assert caught[0].filename == __file__  # the caller's line


def test_gradient_summary_callback_writes_the_numbers_without_alerts(old):
    events = old.events["summary"]
    norms = scalar_series(events, "grad_norm/global")
    assert norms.keys() == STEPS
    snapshot = old.optimizer.snapshot()
    assert snapshot.step == 3
    assert norms[3] == pytest.approx(snapshot.totals["grad_norm"], rel=1e-6)
    assert not [t for t in events.Tags()["tensors"] if t.startswith("alerts/")]
    assert old.history.history["grad_norm"] == [pytest.approx(norms[3], rel=1e-6)]


def test_gradient_alert_callback_writes_only_its_flags(old):
    events = old.events["alerts"]
    tags = events.Tags()["tensors"]
    assert scalar_series(events, "alerts/nonfinite") == dict.fromkeys(STEPS, 0.0)
    assert not [t for t in tags if not t.startswith("alerts/")]
    callback, _ = old.made["alerts"]
    assert callback.alerts == []
    assert old.history.history["grad_alerts"] == [0]


@pytest.mark.parametrize("name", ["first", "kw"])
def test_activation_callback_with_options_object_probes(old, name):
    std = scalar_series(old.events[name], "activation_std/mlp/hidden")
    assert std.keys() == {0, 2}
    assert std[0] == pytest.approx(_hidden_std(old.initial, old.probe), rel=1e-5)
    other = "kw" if name == "first" else "first"
    assert std == scalar_series(old.events[other], "activation_std/mlp/hidden")


def test_activation_monitor_options_keyword(tmp_path):
    x, _ = data(n=16)
    model = mlp()
    options = ActivationOptions(data=x, log_dir=str(tmp_path))
    monitor, caught = _made(lambda: ActivationMonitor(model, options=options))
    assert len(caught) == 1
    assert "ActivationMonitor(options=...) is deprecated" in str(caught[0].message)
    assert "ActivationMonitor(data, config=...)" in str(caught[0].message)
    assert monitor.options == options
    monitor.record(7)
    monitor.close()
    std = scalar_series(load_events(str(tmp_path)), "activation_std/mlp/hidden")
    assert std == {7: pytest.approx(_hidden_std(model.get_weights(), x), rel=1e-5)}


@pytest.mark.parametrize(
    "make",
    [
        lambda: ActivationMonitorCallback(None),
        lambda: ActivationMonitorCallback(),
        lambda: ActivationMonitorCallback(None, every_n_steps=2),
        lambda: ActivationMonitor(mlp(), None),
    ],
    ids=["none", "missing", "none-with-options", "monitor"],
)
def test_a_missing_probe_batch_is_a_value_error_naming_data(make):
    with pytest.raises(ValueError) as raised:
        make()
    message = str(raised.value)
    assert message.startswith("`data` must be a batch of model inputs")
    assert message.endswith("Received: data=None")
