import re

import numpy as np
import pytest
import tensorflow as tf

from keras_gradmon.core.clipping import make_clip_rule, rule_params
from keras_gradmon.core.clipping.agc import AdaptiveGradientClip
from keras_gradmon.core.clipping.autoclip import AutoClip
from keras_gradmon.core.clipping.base import ClipRule
from keras_gradmon.core.clipping.global_norm import GlobalNormClip
from keras_gradmon.core.clipping.zclip import ZClip
from tests.clipping import _reference as ref

RULES = [
    GlobalNormClip(max_norm=0.5),
    AutoClip(percentile=50.0, history=8),
    ZClip(warmup=2, z_threshold=1.0),
    AdaptiveGradientClip(clipping=0.05),
]
SPECS = {
    "global_norm": {},
    "autoclip": {"buffer": ((8,), "float32", 0.0), "count": ((), "int64", 0.0)},
    "zclip": {
        "count": ((), "int64", 0.0),
        "mean": ((), "float32", 0.0),
        "var": ((), "float32", 0.0),
    },
    "agc": {},
}


def _run(rule, mode, dtype, steps=4):
    """Runs `steps` clip steps on fixed data; returns grads and final state."""
    rng = np.random.default_rng(3)
    weights = [rng.standard_normal(s).astype(np.float32) for s in [(4, 3), (3,)]]
    fn = ref.compiled_clip(rule, mode)
    state = ref.initial_state(rule)
    for t in range(steps):
        scale = 1.0 if t < steps - 1 else 10.0  # the last step is a spike
        grads = [tf.constant(w * 0.3 * scale + 0.1, dtype) for w in weights]
        norm = ref.global_norm64([tf.cast(g, tf.float64) for g in grads])
        out, state = fn(
            grads,
            [tf.constant(w) for w in weights],
            tf.constant(norm, tf.float32),
            state,
        )
    return grads, out, state


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_half_precision_keeps_dtype_and_matches_float32(rule, mode):
    grads, want, want_state = _run(rule, "eager", tf.float32)
    # The final spike is clipped, so the comparison is not input vs input.
    assert any(not np.array_equal(w, g) for w, g in zip(want, grads))
    for dtype, rtol in [(tf.float16, 2e-3), (tf.bfloat16, 1.6e-2)]:
        grads, out, state = _run(rule, mode, dtype)
        assert [o.dtype for o in out] == [dtype] * len(grads)
        for o, w in zip(out, want):
            np.testing.assert_allclose(
                np.float32(tf.cast(o, tf.float32)), w.numpy(), rtol=rtol, atol=rtol
            )
        assert set(state) == set(want_state)


@pytest.mark.parametrize("mode", ["eager", "function"])  # shapes and dtypes
@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)  # set at tracing
def test_state_matches_its_spec(rule, mode):
    assert rule.state_spec() == SPECS[rule.name]
    _, _, state = _run(rule, mode, tf.float32)
    assert set(state) == set(SPECS[rule.name])
    for name, (shape, dtype, _) in SPECS[rule.name].items():
        assert tuple(state[name].shape) == shape
        assert state[name].dtype.name == dtype


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_clip_is_pure_given_variable_values(rule):
    variables = {
        name: tf.Variable(value) for name, value in ref.initial_state(rule).items()
    }
    before = {name: v.numpy().copy() for name, v in variables.items()}

    @tf.function(jit_compile=True, autograph=False)
    def step(g):
        values = {name: v.read_value() for name, v in variables.items()}
        return ref.clipped(rule, [g], [g * 3.0], tf.norm(g), values)

    _, new_state = step(tf.constant([3.0, 4.0]))
    for name, v in variables.items():
        np.testing.assert_array_equal(v.numpy(), before[name])
    if variables:  # the new values are returned instead
        assert int(new_state["count"]) == 1


PARAMS = {
    "global_norm": {"max_norm": 0.5},
    "autoclip": {"percentile": 50.0, "history": 8},
    "zclip": {
        "alpha": 0.97,
        "z_threshold": 1.0,
        "warmup": 2,
        "eps": 1e-6,
        "mode": "reciprocal",
    },
    "agc": {"clipping": 0.05, "eps": 1e-3},
}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_factory_round_trip(rule):
    assert isinstance(rule, ClipRule)
    assert rule_params(rule) == PARAMS[rule.name]
    rebuilt = make_clip_rule(rule.name, **rule_params(rule))
    assert rebuilt == rule and type(rebuilt) is type(rule)
    other = {**PARAMS[rule.name], next(iter(PARAMS[rule.name])): 0.25}
    assert make_clip_rule(rule.name, **other) != rule


def test_missing_required_parameter():
    message = (
        "Clipping method 'global_norm' needs the parameter `max_norm`. Received: {}"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make_clip_rule("global_norm")


def test_factory_defaults():
    assert make_clip_rule("autoclip") == AutoClip(percentile=10.0, history=1000)
    assert make_clip_rule("zclip") == ZClip(0.97, 2.5, 25, 1e-6, "reciprocal")
    assert make_clip_rule("agc") == AdaptiveGradientClip(0.01, 1e-3)
    assert make_clip_rule("global_norm", max_norm=2).max_norm == 2.0


def test_unknown_method():
    message = (
        "Unknown clipping method 'foo'. Valid methods: "
        "['agc', 'autoclip', 'global_norm', 'zclip']. Received: method='foo'"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        make_clip_rule("foo")


def test_unknown_parameter():
    message = (
        "Unknown parameter 'max_norm' for clipping method 'zclip'. Valid "
        "parameters: ['alpha', 'z_threshold', 'warmup', 'eps', 'mode']. "
        "Received: max_norm=1.0"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        make_clip_rule("zclip", max_norm=1.0)


INVALID = [
    ("global_norm", "max_norm", 0, "a positive finite number"),
    ("global_norm", "max_norm", -1.0, "a positive finite number"),
    ("global_norm", "max_norm", float("inf"), "a positive finite number"),
    ("global_norm", "max_norm", float("nan"), "a positive finite number"),
    ("global_norm", "max_norm", True, "a positive finite number"),
    ("global_norm", "max_norm", "1", "a positive finite number"),
    ("autoclip", "percentile", 101, "a number between 0 and 100"),
    ("autoclip", "percentile", -0.5, "a number between 0 and 100"),
    ("autoclip", "percentile", float("nan"), "a number between 0 and 100"),
    ("autoclip", "history", 0, "a positive integer"),
    ("autoclip", "history", 10.0, "a positive integer"),
    ("zclip", "alpha", 1.0, "a number strictly between 0 and 1"),
    ("zclip", "alpha", 0, "a number strictly between 0 and 1"),
    ("zclip", "z_threshold", 0.0, "a positive finite number"),
    ("zclip", "warmup", 0, "a positive integer"),
    ("zclip", "eps", -1e-6, "a positive finite number"),
    ("zclip", "mode", "percentile", "one of ['reciprocal', 'zscore']"),
    ("agc", "clipping", 0.0, "a positive finite number"),
    ("agc", "eps", float("inf"), "a positive finite number"),
]


@pytest.mark.parametrize("method, name, value, requirement", INVALID)
def test_invalid_parameter_is_rejected(method, name, value, requirement):
    message = f"`{name}` must be {requirement}. Received: {name}={value!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make_clip_rule(method, **{name: value})


def test_documented_message_form():
    with pytest.raises(ValueError) as info:
        GlobalNormClip(max_norm=0)
    assert str(info.value) == (
        "`max_norm` must be a positive finite number. Received: max_norm=0"
    )
