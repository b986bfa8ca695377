"""The clipping rules on the JAX backend, under `jax.jit`: several steps with
the state threaded through, against tests/clipping's NumPy float64
references; each rule compiles once; TensorFlow is never imported."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from keras import ops

from keras_gradmon.core.clipping.agc import AdaptiveGradientClip
from keras_gradmon.core.clipping.autoclip import AutoClip
from keras_gradmon.core.clipping.base import global_norm_of, wide_int
from keras_gradmon.core.clipping.global_norm import GlobalNormClip
from keras_gradmon.core.clipping.zclip import ZClip
from tests.clipping import _reference as ref
from tests.jax.processes import run_python
from tests.jax.test_no_tensorflow import _BLOCKED

RULES = [
    GlobalNormClip(max_norm=2.5),
    AutoClip(percentile=25.0, history=4),
    ZClip(alpha=0.9, z_threshold=1.5, warmup=3),
    AdaptiveGradientClip(clipping=0.4),
]
#: The global norm of each step: a ring wrap, spikes, NaN/Inf, 1e30 (float32
#: squares overflow), an all-zero gradient.
NORMS = [1.0, 2.0, 1.5, 9.0, np.nan, 1.2, 1e30, np.inf, 0.0, 3.0, 1.1, 6.0]
SHAPES = [(4, 3), (3,)]


def _jitted(rule):
    """`rule` under `jax.jit` from gradients to (grads, state, post-norm),
    and the list its traces are counted in."""
    traces = []

    def step(grads, weights, state):
        traces.append(1)
        result = rule.clip(grads, weights, global_norm_of(grads), state)
        return result.grads, result.state, result.post_norm

    return jax.jit(step), traces


def _steps(rng):
    """Per step, float32 gradients (two tensors) of global norm `NORMS[t]`."""
    return [
        [ref.with_norm(rng, SHAPES[0], n * 0.6), ref.with_norm(rng, SHAPES[1], n * 0.8)]
        for n in NORMS
    ]


def _scaled(grads, scale):
    """`grads * scale`; NaN everywhere where `scale` is."""
    return [np.float64(g) * scale for g in grads]


def _expected_global_norm(rule, steps, weights):
    for grads in steps:
        if np.isfinite(ref.global_norm64(grads)):
            yield ref.global_norm_clip(grads, rule.max_norm), {}
        else:
            yield _scaled(grads, np.nan), {}


def _expected_autoclip(rule, steps, weights):
    norms = [ref.global_norm64(g) for g in steps]
    expected = ref.autoclip(norms, rule.percentile, rule.history)
    for grads, (threshold, scale, kept) in zip(steps, expected):
        yield _scaled(grads, scale), {"threshold": threshold, "kept": kept}


def _expected_zclip(rule, steps, weights):
    norms = [ref.global_norm64(g) for g in steps]
    args = rule.alpha, rule.z_threshold, rule.warmup, rule.eps, rule.mode
    for grads, (mean, var, effective) in zip(steps, ref.zclip(norms, *args)):
        norm = ref.global_norm64(grads)
        scale = effective / norm if norm != 0 else 1.0  # NaN: NaN
        yield _scaled(grads, scale), {"mean": mean, "var": var}


def _expected_agc(rule, steps, weights):
    for grads in steps:
        want = []
        for g, w in zip(grads, weights):
            with np.errstate(invalid="ignore"):
                clipped = ref.agc(g, w, rule.clipping, rule.eps)
            # A non-finite unit is NaN throughout; the others are unaffected.
            bad = ~np.isfinite(ref.unitwise_norm(g))
            want.append(np.where(np.broadcast_to(bad, g.shape), np.nan, clipped))
        yield want, {}


EXPECTED = {
    "global_norm": _expected_global_norm,
    "autoclip": _expected_autoclip,
    "zclip": _expected_zclip,
    "agc": _expected_agc,
}


def _check_state(rule, state, want, t):
    """The threaded state against the reference's, where it has one."""
    if "threshold" in want:
        assert min(int(state["count"]), rule.history) == want["kept"], t
        got = float(rule.threshold(state))
        np.testing.assert_allclose(got, want["threshold"], rtol=2e-6, err_msg=t)
    if want.get("mean") is not None:  # ZClip's warm-up is over
        np.testing.assert_allclose(float(state["mean"]), want["mean"], rtol=2e-6)
        np.testing.assert_allclose(float(state["var"]), want["var"], rtol=5e-5)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_steps_match_reference_and_compile_once(rule):
    rng = np.random.default_rng(len(rule.name))
    weights = [rng.standard_normal(s).astype("f4") for s in SHAPES]
    steps = _steps(rng)
    step, traces = _jitted(rule)
    state = ref.initial_state(rule)
    expected = EXPECTED[rule.name](rule, steps, weights)
    changed = 0
    for t, (grads, (want, want_state)) in enumerate(zip(steps, expected)):
        out, state, post = step([jnp.asarray(g) for g in grads], weights, state)
        for o, w, g in zip(out, want, grads):
            assert o.dtype == jnp.float32
            np.testing.assert_allclose(o, w, rtol=2e-6, atol=1e-37, err_msg=str(t))
            changed += not np.array_equal(np.asarray(o), g, equal_nan=True)
        _check_state(rule, state, want_state, str(t))
        finite = all(np.isfinite(w).all() for w in want)
        want_post = ref.global_norm64(want) if finite else np.nan
        np.testing.assert_allclose(float(post), want_post, rtol=2e-6, err_msg=str(t))
    assert changed >= 4  # the rule did clip
    assert {k: v.dtype for k, v in state.items()} == {
        name: jnp.dtype(wide_int() if dtype == "int64" else dtype)
        for name, (_, dtype, _) in rule.state_spec().items()
    }
    assert len(traces) == 1


HALF = {"float16": 2e-3, "bfloat16": 1.6e-2}


@pytest.mark.parametrize(
    "rule, dtype",
    zip(RULES, ["float16", "bfloat16", "float16", "bfloat16"]),
    ids=lambda x: getattr(x, "name", x),
)
def test_half_precision_keeps_dtype_and_matches_float32(rule, dtype):
    rng = np.random.default_rng(4)
    weights = [rng.standard_normal(s).astype("f4") for s in SHAPES]
    grads = [w * 3.0 + 0.5 for w in weights]
    step, _ = _jitted(rule)
    state = ref.initial_state(rule)
    for scale in [0.1, 0.12, 0.11]:  # a history the next step is a spike to
        _, state, _ = step([g * scale for g in grads], weights, state)
    half = [ops.cast(g, dtype) for g in grads]
    # The float32 rule of the values half precision holds: clipped.
    held = [ops.cast(g, "float32") for g in half]
    want, _, _ = step(held, weights, state)
    out, _, _ = step(half, weights, state)
    assert [o.dtype for o in out] == [jnp.dtype(dtype)] * len(out)
    assert not np.array_equal(np.asarray(want[0]), np.asarray(held[0]))
    for o, w in zip(out, want):
        np.testing.assert_allclose(np.float32(o), w, rtol=HALF[dtype], atol=HALF[dtype])


def test_norm_past_float32_max_is_clipped_by_its_true_value():
    # Every element finite, the global norm ~1.2e39 is Inf in float32 (JAX
    # has no float64 here): the scale comes from the elements, not 0 or NaN.
    grads = [np.full([4, 3], 3e38, "f4"), np.full([3], -3e38, "f4")]
    step, _ = _jitted(GlobalNormClip(max_norm=1.0))
    out, _, post = step([jnp.asarray(g) for g in grads], [], {})
    for o, w in zip(out, ref.global_norm_clip(grads, 1.0)):
        np.testing.assert_allclose(o, w, rtol=2e-6)
    assert float(post) == 1.0


_CLIP = """
import jax, jax.numpy as jnp, sys
from keras_gradmon.core.clipping import global_norm_of, make_clip_rule
for name in ["global_norm", "autoclip", "zclip", "agc"]:
    rule = make_clip_rule(name, **({"max_norm": 1.0} if name == "global_norm" else {}))
    state = {k: jnp.zeros(s, "int32" if d == "int64" else d)
             for k, (s, d, _) in rule.state_spec().items()}
    grads = [jnp.asarray([3e30, 4e30]), jnp.ones([2, 3])]
    step = jax.jit(lambda g, w, s: rule.clip(g, w, global_norm_of(g), s).grads)
    step(grads, grads, state)[0].block_until_ready()
print("tensorflow" in sys.modules)
"""


def test_rules_without_tensorflow_installed():
    out = run_python(["-c", _BLOCKED + _CLIP], "jax")
    assert out.split()[-1] == "False"
