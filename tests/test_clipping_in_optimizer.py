import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_gradmon import GradientMonitorOptimizer, MonitorConfig
from tests.conftest import compile_fn
from tests.helpers import LOSS, data, gradients, mlp


def _step_fn(model, optimizer, mode, poison=None):
    def step(xb, yb, poisoned):
        with tf.GradientTape() as tape:
            loss = LOSS(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        if poison is not None:  # NaN into one element of one gradient
            mask = tf.one_hot(0, tf.size(grads[poison]), on_value=np.nan)
            grads[poison] += tf.where(
                poisoned,
                tf.reshape(mask, grads[poison].shape),
                tf.zeros_like(grads[poison]),
            )
        optimizer.apply(grads, model.trainable_variables)
        return loss

    compiled = compile_fn(step, mode)
    # `poisoned` as a tensor: one trace (one XLA compile) serves the clean
    # and the poisoned steps, as when a NaN arises at run time.
    return lambda xb, yb, poisoned: compiled(xb, yb, tf.constant(poisoned))


def test_global_norm_clipping_matches_tf_clip_by_global_norm(mode):
    x, y = data(n=16)
    plain, monitored = mlp(), mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1),
        every_n_steps=1,
        clipping={"method": "global_norm", "max_norm": 0.05},
    )
    grads = gradients(plain, x, y)
    clipped, norm = tf.clip_by_global_norm([tf.constant(g) for g in grads], 0.05)
    reference = keras.optimizers.SGD(0.1)
    reference.apply(clipped, plain.trainable_variables)
    _step_fn(monitored, optimizer, mode)(x, y, False)
    for a, b in zip(plain.get_weights(), monitored.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    totals = optimizer.snapshot().totals
    np.testing.assert_allclose(totals["clip_pre_norm"], norm.numpy(), rtol=1e-6)
    assert totals["clip_post_norm"] == pytest.approx(0.05)
    assert totals["clip_fraction"] == 1.0
    # Statistics describe the gradients before clipping.
    np.testing.assert_allclose(totals["grad_norm"], norm.numpy(), rtol=1e-5)


#: Eager and tf.function only: the counting below is integer arithmetic
#: that XLA cannot round differently, and disabling the rule is decided while
#: tracing (the step is then the unclipped one, whose bit identity under XLA
#: is test_optimizer.py's `test_weights_bit_identical_to_unwrapped[xla-*]`).
NOT_XLA = pytest.mark.parametrize("mode", ["eager", "function"])


@NOT_XLA
def test_clip_fraction_counts_steps_since_the_last_summary(mode):
    x, y = data(n=128)
    model = mlp()
    norms = [
        np.linalg.norm(np.concatenate([g.ravel() for g in gradients(model, x, y)]))
    ]
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.0),
        every_n_steps=4,  # lr 0: the same grads
        clipping={"method": "global_norm", "max_norm": float(norms[0]) * 0.5},
    )
    step = _step_fn(model, optimizer, mode)
    for _ in range(4):
        step(x, y, False)
    # Steps 1, 2, 3 clipped after the summary at step 0 (which counted 1 of 1).
    assert optimizer.snapshot().totals["clip_fraction"] == 1.0
    step(x, y, False)
    assert optimizer.snapshot().step == 4
    assert optimizer.snapshot().totals["clip_fraction"] == 1.0
    # Nothing skipped; no step, nor clipped step, since the summary at step 4.
    assert optimizer.monitor.state.step_counts.numpy().tolist() == [0, 0, 0]


@NOT_XLA
def test_clipping_disabled_by_one_key_is_bit_identical(mode):
    x, y = data(n=16)
    plain, monitored = mlp(), mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.Adam(0.1),
        every_n_steps=1,
        clipping={"method": "global_norm", "max_norm": 1e-3, "enabled": False},
    )
    plain_opt = keras.optimizers.Adam(0.1)
    _step_fn(plain, plain_opt, mode)(x, y, False)
    _step_fn(monitored, optimizer, mode)(x, y, False)
    for a, b in zip(plain.get_weights(), monitored.get_weights()):
        np.testing.assert_array_equal(a, b)
    snapshot = optimizer.snapshot()
    values = optimizer.monitor.tags.scalar_values(snapshot.values, snapshot.has_grad)
    assert "clip/pre_norm" not in values


# Every rule eagerly and traced (its state guard and the gate are decided
# and built while tracing); under XLA the gate alone (None) and the richest
# state guard (autoclip's ring buffer and count), the compiled arithmetic of
# a skipped step (the other rules' guards are the same `where` on `finite`).
SKIP_CASES = [
    *[
        (m, r)
        for m in ("eager", "function")
        for r in ("global_norm", "autoclip", "zclip", "agc", None)
    ],
    ("xla", None),
    ("xla", "autoclip"),
]


@pytest.mark.parametrize("mode, method", SKIP_CASES)
def test_nonfinite_step_is_skipped_bit_for_bit(mode, method):
    x, y = data(n=16)
    model = mlp()
    clipping = None
    if method:
        clipping = {
            "method": method,
            **({"max_norm": 1.0} if method == "global_norm" else {}),
        }
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.Adam(0.01),
        every_n_steps=1,
        skip_nonfinite=True,
        clipping=clipping,
    )
    step = _step_fn(model, optimizer, mode, poison=2)
    step(x, y, False)
    weights = [w.copy() for w in model.get_weights()]
    inner = [v.numpy().copy() for v in optimizer.inner_optimizer.variables]
    clip_state = {k: v.numpy().copy() for k, v in optimizer.monitor.state.clip.items()}
    step(x, y, True)
    for a, b in zip(weights, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(inner, optimizer.inner_optimizer.variables):
        np.testing.assert_array_equal(a, b.numpy())
    for k, v in clip_state.items():  # non-finite norms never enter the state
        np.testing.assert_array_equal(v, optimizer.monitor.state.clip[k].numpy())
    snapshot = optimizer.snapshot()
    assert snapshot.totals["skipped_steps"] == 1
    assert snapshot.totals["grad_nonfinite"] == 1
    assert snapshot.grad[2, 7] == 1  # the poisoned variable is named
    assert int(optimizer.iterations.numpy()) == 1
    step(x, y, False)  # training goes on
    assert int(optimizer.iterations.numpy()) == 2
    assert all(np.isfinite(w).all() for w in model.get_weights())


def test_adaptive_rules_keep_state_across_steps():
    x, y = data(n=16)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.0),
        every_n_steps=1,
        clipping={"method": "autoclip", "percentile": 50.0, "history": 4},
    )
    step = _step_fn(model, optimizer, "function")
    for _ in range(6):
        step(x, y, False)
    state = optimizer.monitor.state.clip
    assert int(state["count"].numpy()) == 6
    saved = {id(v) for v in optimizer.variables}  # what model.save and checkpoints hold
    assert all(id(v) in saved for v in state.values())


def test_demonstration_clipping_from_a_config_file_rescues_divergence(tmp_path):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(256, 8)) * 10).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")

    def train(config):
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)]
        )
        model.compile(
            GradientMonitorOptimizer(keras.optimizers.SGD(0.02), config=config), "mse"
        )
        return model.fit(x, y, batch_size=32, epochs=8, verbose=0).history["loss"]

    unclipped = train(MonitorConfig(every_n_steps=10))
    assert not np.isfinite(unclipped[-1])  # diverges to NaN/Inf
    path = tmp_path / "monitor.yaml"
    path.write_text(
        "every_n_steps: 10\nclipping: {method: global_norm, max_norm: 1.0}\n"
    )
    clipped = train(MonitorConfig.from_file(path))
    assert np.all(np.isfinite(clipped))
    assert clipped[-1] < clipped[0] * 0.5


def test_config_round_trips_through_dict_json_and_yaml(tmp_path):
    import yaml

    config = MonitorConfig(
        every_n_steps=5,
        groups={"head": "head"},
        skip_nonfinite=True,
        clipping={"method": "zclip", "z_threshold": 3.0, "warmup": 10},
    )
    assert MonitorConfig.from_dict(config.to_dict()) == config
    (tmp_path / "c.json").write_text(json.dumps(config.to_dict()))
    assert MonitorConfig.from_file(tmp_path / "c.json") == config
    (tmp_path / "c.yml").write_text(yaml.safe_dump({"monitor": config.to_dict()}))
    assert MonitorConfig.from_file(tmp_path / "c.yml") == config


@pytest.mark.parametrize(
    "clipping, message",
    [
        (
            {"method": "global_norm", "max_norm": -1},
            r"`max_norm` must be a positive "
            r"finite number. Received: max_norm=-1",
        ),
        ({"method": "global_norm"}, r"max_norm"),
        ({"method": "clipnorm"}, r"Unknown clipping method 'clipnorm'"),
        ({"max_norm": 1.0}, r'`clipping` must be None or a mapping with a "method"'),
        (
            {"method": "agc", "enabled": "yes"},
            r"`clipping\['enabled'\]` must be a bool",
        ),
        ({"method": "autoclip", "percentile": 150}, r"percentile"),
    ],
)
def test_invalid_clipping_is_rejected(clipping, message):
    with pytest.raises(ValueError, match=message):
        MonitorConfig(clipping=clipping)


def test_config_file_errors(tmp_path):
    (tmp_path / "c.toml").write_text("")
    with pytest.raises(ValueError, match=r"must end in .json, .yaml or .yml"):
        MonitorConfig.from_file(tmp_path / "c.toml")
    (tmp_path / "c.json").write_text('{"every_n": 3}')
    with pytest.raises(ValueError, match=r"Unknown monitor option\(s\) \['every_n'\]"):
        MonitorConfig.from_file(tmp_path / "c.json")
