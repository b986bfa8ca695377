"""`keras_gradmon.watch` on a compiled Keras model (TensorFlow backend, XLA):
the optimizer wrapped in place with training unchanged bit for bit, the
numbers in TensorBoard at the due steps, activations; clipping and a config
file's sections (those two fits without XLA: what they check is set on the
host), and the models it refuses."""

from __future__ import annotations

import types

import keras
import numpy as np
import pytest

import keras_gradmon
from keras_gradmon import ActivationOptions, AlertOptions, GradientMonitorOptimizer
from keras_gradmon.alerts import ThresholdRule
from tests.helpers import LOSS, data, gradients, mlp
from tests.reference import load_events, scalar_series

STEPS = set(range(0, 8, 2))  # 2 epochs of 4 batches, every_n_steps=2


class _Batches(keras.callbacks.Callback):
    """The batch indices `fit` ran, and the weights after each."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []
        self.weights: list[list[np.ndarray]] = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(batch)
        self.weights.append(self.model.get_weights())


def _compiled(optimizer, seed: int = 0, jit_compile: bool = True) -> keras.Model:
    model = mlp(seed)
    model.compile(optimizer, LOSS, jit_compile=jit_compile)
    return model


def _fit(model, x, y, callbacks, epochs: int = 2) -> None:
    model.fit(
        x, y, batch_size=16, epochs=epochs, shuffle=False, verbose=0,
        callbacks=callbacks,
    )


def _hidden_std(weights: list[np.ndarray], probe: np.ndarray) -> float:
    """The float64 std of the hidden layer's ReLU outputs on `probe`."""
    kernel, bias = (w.astype(np.float64) for w in weights[:2])
    return float(np.maximum(probe.astype(np.float64) @ kernel + bias, 0.0).std())


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """The same MLP trained twice from the same weights: once with the plain
    Adam, once `watch`ed (every 2 steps, activations on x[:32])."""
    x, y = data(n=64)
    plain = _compiled(keras.optimizers.Adam(1e-2))
    _fit(plain, x, y, [])

    model = _compiled(keras.optimizers.Adam(1e-2))
    inner = model.optimizer
    initial = model.get_weights()
    step0_grads = gradients(model, x[:16], y[:16])
    log_dir = str(tmp_path_factory.mktemp("watch") / "logs")
    callbacks = keras_gradmon.watch(
        model, log_dir, every_n_steps=2, activations=x[:32]
    )
    wrapper = model.optimizer
    _fit(model, x, y, callbacks)  # the Watch itself, as `fit` gets it
    return types.SimpleNamespace(
        plain=plain,
        model=model,
        inner=inner,
        wrapper=wrapper,
        callbacks=callbacks,
        initial=initial,
        step0_grads=step0_grads,
        probe=x[:32],
        events=load_events(log_dir),
    )


def test_the_optimizer_is_wrapped_in_place(watched):
    assert isinstance(watched.wrapper, GradientMonitorOptimizer)
    assert watched.model.optimizer is watched.wrapper
    assert watched.wrapper.inner_optimizer is watched.inner
    assert watched.callbacks.optimizers == [watched.wrapper]
    kinds = [type(c).__name__ for c in watched.callbacks]
    assert kinds == ["GradientMonitorCallback", "ActivationMonitorCallback"]
    assert int(watched.wrapper.iterations.numpy()) == 8


def test_training_is_bit_identical_to_the_plain_optimizer(watched):
    plain, model = watched.plain.get_weights(), watched.model.get_weights()
    assert len(plain) == len(model) == 4
    for a, b in zip(plain, model):
        assert a.tobytes() == b.tobytes()
    assert not np.array_equal(model[0], watched.initial[0])  # it did train
    inner = [v.numpy() for v in watched.inner.variables]
    reference = [v.numpy() for v in watched.plain.optimizer.variables]
    assert [a.tobytes() for a in inner] == [b.tobytes() for b in reference]


def test_the_global_norm_is_written_at_the_due_steps(watched):
    norms = scalar_series(watched.events, "grad_norm/global")
    assert norms.keys() == STEPS
    flat = np.concatenate([g.astype(np.float64).ravel() for g in watched.step0_grads])
    assert norms[0] == pytest.approx(np.linalg.norm(flat), rel=1e-5)
    # The last summary is the wrapper's latest snapshot, step and value.
    snapshot = watched.wrapper.snapshot()
    assert snapshot.step == 6
    assert norms[6] == pytest.approx(snapshot.totals["grad_norm"], rel=1e-6)


def test_activations_are_written_beside_the_gradients(watched):
    std = scalar_series(watched.events, "activation_std/mlp/hidden")
    assert 0 in std and std.keys() <= STEPS
    # Step 0 is measured before the first update: the initial weights.
    expected = _hidden_std(watched.initial, watched.probe)
    assert std[0] == pytest.approx(expected, rel=1e-5)


def test_default_alerts_write_their_flags(watched):
    flags = scalar_series(watched.events, "alerts/nonfinite")
    assert flags == {step: 0.0 for step in STEPS}


def test_a_second_watch_reuses_the_wrapper(watched):
    again = keras_gradmon.watch(watched.model)
    assert again.optimizers[0] is watched.wrapper
    assert watched.model.optimizer is watched.wrapper
    assert watched.wrapper.inner_optimizer is watched.inner


def test_clipping_clips_the_update_and_alerts_false_writes_no_flags(tmp_path):
    x, y = data(n=48)
    x = x * 4.0  # gradient norms well above 1
    # `watch` hands `clipping` to the wrapper: no XLA compile needed here
    # (test_clipping_in_optimizer.py clips under XLA).
    model = _compiled(keras.optimizers.SGD(0.05), jit_compile=False)
    initial = model.get_weights()
    callbacks = keras_gradmon.watch(
        model, str(tmp_path), clipping=1.0, every_n_steps=1, alerts=False
    )
    batches = _Batches()
    _fit(model, x, y, [callbacks, batches], epochs=1)  # a Watch in a list
    assert batches.seen == [0, 1, 2]
    events = load_events(str(tmp_path))
    pre = scalar_series(events, "clip/pre_norm")
    post = scalar_series(events, "clip/post_norm")
    assert pre.keys() == post.keys() == {0, 1, 2}
    assert pre == pytest.approx(scalar_series(events, "grad_norm/global"), rel=1e-6)
    clipped = [step for step, norm in pre.items() if norm > 1.0]
    assert clipped, pre
    for step in clipped:
        assert post[step] == pytest.approx(1.0, rel=1e-5)
        assert post[step] <= 1.0 + 1e-6
    # The update itself was clipped: SGD moved the weights by lr * 1.0.
    after = batches.weights[0]
    moved = np.concatenate(
        [(a - b).astype(np.float64).ravel() for a, b in zip(after, initial)]
    )
    assert 0 in clipped
    assert np.linalg.norm(moved) == pytest.approx(0.05 * post[0], rel=1e-4)
    assert not [t for t in events.Tags()["tensors"] if t.startswith("alerts/")]
    assert callbacks.alerts == []


def test_a_config_file_sets_the_monitor_and_the_alerts(tmp_path):
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "gradmon.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "monitor": {"every_n_steps": 2, "histogram_every_n_steps": None},
                "alerts": {"actions": {"critical": "stop"}, "fold_steps": 7},
                # Its own alert field on top of the `alerts` section.
                "activations": {"every_n_steps": 3, "actions": {"critical": "log"}},
            }
        )
    )
    x, y = data(n=128)
    x[64:80] = np.nan  # batch 4 of 8: step 4, a due step
    # What the file sets is read on the host: no XLA compile needed.
    model = _compiled(keras.optimizers.SGD(0.05), jit_compile=False)
    callbacks = keras_gradmon.watch(
        model, str(tmp_path / "logs"), config=str(path), activations=x[:16]
    )
    batches = _Batches()
    _fit(model, x, y, [*callbacks, batches], epochs=1)
    assert model.optimizer.monitor.config.every_n_steps == 2
    activation_options = callbacks[1].monitor.options
    assert activation_options.every_n_steps == 3
    assert activation_options.actions == {"critical": "log"}
    assert activation_options.fold_steps == 7
    assert batches.seen == [0, 1, 2, 3, 4]  # stopped at the batch that fired
    events = load_events(str(tmp_path / "logs"))
    assert scalar_series(events, "grad_norm/global").keys() == {0, 2, 4}
    assert scalar_series(events, "alerts/nonfinite") == {0: 0.0, 2: 0.0, 4: 1.0}
    assert not [t for t in events.Tags()["tensors"] if t.startswith("grad_hist/")]
    assert scalar_series(events, "activation_std/mlp/hidden").keys() == {0, 3}
    assert [(a.rule, a.tier, a.step) for a in callbacks.alerts][:1] == [
        ("nonfinite", "critical", 4)
    ]


def _activation_monitor(activations, alerts):
    """The activation monitor `watch` sets up for `activations`, `alerts`."""
    model = _compiled(keras.optimizers.SGD(0.05))
    callbacks = keras_gradmon.watch(model, activations=activations, alerts=alerts)
    callbacks[1].set_model(model)
    return callbacks[1].monitor


def test_activation_options_keep_their_own_alert_fields():
    probe = data(n=16)[0]
    alerts = AlertOptions(actions={"critical": "stop"}, cooldown_steps=5)
    given = ActivationOptions(data=probe, actions={"critical": "raise"}, fold_steps=3)
    for activations in (given, {"data": probe, "actions": {"critical": "raise"}}):
        options = _activation_monitor(activations, alerts).options
        assert options.actions == {"critical": "raise"}  # its own
        assert options.cooldown_steps == 5  # the shared alerts'
    assert options.fold_steps == 100
    assert _activation_monitor(given, alerts).options.fold_steps == 3


def test_the_gradient_rules_are_not_the_activation_rules():
    probe = data(n=16)[0]
    alerts = AlertOptions(rules={"explosion": ThresholdRule(warning=1.0)})
    monitor = _activation_monitor(probe, alerts)
    assert set(monitor.engine.rules) == {
        "activation_collapse",
        "activation_nonfinite",
        "dead_units",
    }
    off = _activation_monitor({"data": probe, "actions": {"critical": "raise"}}, False)
    assert dict(off.engine.rules) == {}


def test_an_uncompiled_model_is_refused():
    model = mlp()
    with pytest.raises(ValueError, match=r"`target` must be a compiled Keras model"):
        keras_gradmon.watch(model)
    with pytest.raises(ValueError, match=r"Received: target=<Sequential name=mlp"):
        keras_gradmon.watch(model)


def test_an_optimizer_that_trained_already_is_refused():
    x, y = data(n=16)
    model = mlp()
    model.compile(keras.optimizers.Adam(1e-2), LOSS)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    trained = model.optimizer
    with pytest.raises(ValueError) as raised:
        keras_gradmon.watch(model, alerts=False)
    message = str(raised.value)
    assert message.startswith("`model.optimizer` has trained already")
    assert f"Received: model.optimizer={trained!r}" in message
    assert model.optimizer is trained  # left as it was


def test_watch_stays_the_function_when_its_module_is_imported():
    # The module that holds `watch` is `keras_gradmon.watching`: importing it
    # (the tf-agents integration does, so does `keras_gradmon.wrap`) leaves
    # the package's attribute `watch` the function.
    import keras_gradmon.watching

    model = _compiled(keras.optimizers.SGD(0.05))
    watched = keras_gradmon.watch(model, alerts=False)
    assert isinstance(watched, keras_gradmon.Watch)
    assert watched.optimizers == [model.optimizer]
    assert isinstance(model.optimizer, GradientMonitorOptimizer)
