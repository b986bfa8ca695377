import numpy as np
import pytest
import tensorflow as tf

from keras_gradmon.core.clipping.zclip import ZClip
from tests.clipping import _reference as ref
from tests.conftest import compile_fn

WARMUP = 6


def _norm_sequence():
    rng = np.random.default_rng(7)
    norms = 1.0 + 0.1 * rng.standard_normal(40)
    norms[3] = 1.6  # a spike during warm-up: collected, never clipped
    norms[12] = 8.0  # spikes after warm-up, two in a row
    norms[13] = 6.0
    norms[25] = 3.0
    norms[33] = 1.5
    norms[[8, 20, 30]] = np.nan, np.inf, np.nan  # never enter the state
    return norms.astype(np.float32)


@pytest.mark.parametrize("zmode", ["reciprocal", "zscore"])
def test_sequence_matches_reference(mode, zmode):
    rule = ZClip(alpha=0.9, z_threshold=2.5, warmup=WARMUP, eps=1e-6, mode=zmode)
    norms = _norm_sequence()
    step = compile_fn(lambda g, n, s: ref.clipped(rule, [g], [g], n, s), mode)
    expected = ref.zclip(norms.astype(np.float64), 0.9, 2.5, WARMUP, 1e-6, zmode)
    rng = np.random.default_rng(0)
    state = ref.initial_state(rule)
    finite_seen = clipped = 0
    for t, (norm, (mean, var, effective)) in enumerate(zip(norms, expected)):
        grad = ref.with_norm(rng, (5, 2), norm)
        [out], new = step(tf.constant(grad), tf.constant(norm), state)
        out = out.numpy()
        if not np.isfinite(norm):
            assert np.isnan(out).all(), t
            for name in state:
                np.testing.assert_array_equal(new[name], state[name])
            state = new
            continue
        finite_seen += 1
        assert int(new["count"]) == finite_seen, t
        if mean is not None:  # warm-up buffer full: statistics must match
            np.testing.assert_allclose(float(new["mean"]), mean, rtol=2e-6)
            np.testing.assert_allclose(float(new["var"]), var, rtol=5e-5)
        got_norm = ref.global_norm64([out])
        np.testing.assert_allclose(got_norm, effective, rtol=2e-6, err_msg=str(t))
        if effective == norm:
            np.testing.assert_array_equal(out, grad)  # untouched, bit for bit
        else:
            clipped += 1
            assert finite_seen > WARMUP, t
            np.testing.assert_allclose(out, grad * (effective / norm), rtol=2e-6)
        state = new
    assert clipped == 4  # the spikes after warm-up, and only them


def test_warmup_initialises_population_statistics(mode):
    rule = ZClip(warmup=4)
    step = compile_fn(lambda g, n, s: ref.clipped(rule, [g], [g], n, s), mode)
    state = ref.initial_state(rule)
    norms = [2.0, 4.0, 4.0, 50.0]  # the 50 is collected, not clipped
    for norm in norms:
        grad = tf.constant([norm, 0.0])
        [out], state = step(grad, tf.constant(norm), state)
        np.testing.assert_array_equal(out.numpy(), grad.numpy())
    np.testing.assert_allclose(float(state["mean"]), np.mean(norms), rtol=1e-7)
    np.testing.assert_allclose(float(state["var"]), np.var(norms), rtol=1e-6)


def test_reciprocal_threshold_and_clipped_norm_ema(mode):
    rule = ZClip(alpha=0.97, z_threshold=2.5, warmup=1)
    state = {
        "count": tf.constant(10, tf.int64),
        "mean": tf.constant(1.0),
        "var": tf.constant(0.04),
    }
    step = compile_fn(lambda g, n, s: ref.clipped(rule, [g], [g], n, s), mode)
    [out], new = step(tf.constant([0.0, 5.0]), tf.constant(5.0), state)
    z = (5.0 - 1.0) / (0.2 + 1e-6)
    clipped = 1.0 + 2.5**2 / z * 0.2
    np.testing.assert_allclose(out.numpy(), [0.0, clipped], rtol=1e-6)
    mean = 0.97 * 1.0 + 0.03 * clipped
    np.testing.assert_allclose(float(new["mean"]), mean, rtol=1e-6)
    var = 0.97 * 0.04 + 0.03 * (clipped - mean) ** 2
    np.testing.assert_allclose(float(new["var"]), var, rtol=1e-6)


def test_zscore_mode_clips_to_mean_plus_threshold_std(mode):
    rule = ZClip(z_threshold=2.0, warmup=1, mode="zscore")
    state = {
        "count": tf.constant(3, tf.int64),
        "mean": tf.constant(1.0),
        "var": tf.constant(0.25),
    }
    step = compile_fn(lambda g, n, s: ref.clipped(rule, [g], [g], n, s), mode)
    [out], _ = step(tf.constant([4.0]), tf.constant(4.0), state)
    np.testing.assert_allclose(out.numpy(), [2.0], rtol=1e-6)
    [out], _ = step(tf.constant([1.9]), tf.constant(1.9), state)
    np.testing.assert_array_equal(out.numpy(), np.float32([1.9]))


def test_constant_history_clips_to_the_mean(mode):
    # std = 0: any norm above mean + z * eps is a spike clipped to the mean.
    rule = ZClip(warmup=1)
    state = {
        "count": tf.constant(5, tf.int64),
        "mean": tf.constant(2.0),
        "var": tf.constant(0.0),
    }
    step = compile_fn(lambda g, n, s: ref.clipped(rule, [g], [g], n, s), mode)
    [out], new = step(tf.constant([3.0]), tf.constant(3.0), state)
    np.testing.assert_allclose(out.numpy(), [2.0], rtol=1e-6)
    assert float(new["mean"]) == 2.0 and float(new["var"]) == 0.0
    [out], _ = step(tf.constant([0.0]), tf.constant(0.0), state)
    assert out.numpy().tolist() == [0.0]


def test_eps_is_added_to_the_std_in_the_z_score(mode):
    rule = ZClip(warmup=1, eps=0.1)
    state = {
        "count": tf.constant(5, tf.int64),
        "mean": tf.constant(2.0),
        "var": tf.constant(0.0),
    }
    step = compile_fn(lambda g, n, s: ref.clipped(rule, [g], [g], n, s), mode)
    # z = 0.2 / (0 + 0.1) = 2 < 2.5: not a spike (it would be with std alone).
    [out], new = step(tf.constant([2.2]), tf.constant(2.2), state)
    np.testing.assert_array_equal(out.numpy(), np.float32([2.2]))
    np.testing.assert_allclose(float(new["mean"]), 0.97 * 2.0 + 0.03 * 2.2)
    # z = 0.3 / 0.1 = 3 > 2.5: clipped to the mean, as std = 0.
    [out], _ = step(tf.constant([2.3]), tf.constant(2.3), state)
    np.testing.assert_allclose(out.numpy(), [2.0], rtol=1e-6)
