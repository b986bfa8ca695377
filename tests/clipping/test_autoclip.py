import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_gradmon.core.clipping.autoclip import AutoClip
from tests.clipping import _reference as ref
from tests.conftest import compile_fn


def _norm_sequence(rng, steps):
    norms = np.exp(rng.normal(0.0, 1.0, steps)).astype(np.float32)
    norms[[5, 17]] = np.float32(np.nan), np.float32(np.inf)
    norms[9] = 0.0  # an all-zero gradient is a finite norm like any other
    return norms


@pytest.mark.parametrize("percentile", [0.0, 10.0, 97.5, 100.0])
def test_sequence_matches_reference_through_ring_wrap(mode, percentile):
    history, steps = 7, 24  # > 3 passes over the ring
    rule = AutoClip(percentile=percentile, history=history)
    rng = np.random.default_rng(int(percentile * 10))
    norms = _norm_sequence(rng, steps)
    step = compile_fn(
        lambda g, n, s: (*ref.clipped(rule, [g], [g], n, s), rule.threshold(s)), mode
    )
    state = ref.initial_state(rule)
    expected = ref.autoclip(norms.astype(np.float64), percentile, history)
    clipped_steps = 0
    for t, (norm, (threshold, scale, kept)) in enumerate(zip(norms, expected)):
        grad = ref.with_norm(rng, (4, 3), norm)
        [out], new_state, _ = step(tf.constant(grad), tf.constant(norm), state)
        out = out.numpy()
        count = int(new_state["count"])
        assert min(count, history) == kept, t
        if not np.isfinite(norm):
            assert np.isnan(out).all(), t
            np.testing.assert_array_equal(new_state["buffer"], state["buffer"])
            assert count == int(state["count"]), t
        else:
            got = float(rule.threshold(new_state))
            np.testing.assert_allclose(got, threshold, rtol=2e-6, err_msg=str(t))
            valid = np.sort(new_state["buffer"].numpy()[: min(count, history)])
            window = [n for n in norms[: t + 1] if np.isfinite(n)][-history:]
            np.testing.assert_array_equal(valid, np.sort(window))
            np.testing.assert_allclose(out, grad * scale, rtol=1e-5, atol=1e-7)
            clipped_steps += scale < 1 - 1e-6
        state = new_state
    assert int(state["count"]) == steps - 2
    if percentile < 100:
        assert clipped_steps >= (5 if percentile <= 50 else 2)  # it does clip
    else:
        assert clipped_steps == 0  # the newest norm is never above the max


def test_clipping_is_tf_clip_by_global_norm_at_the_threshold(mode):
    rule = AutoClip(percentile=25.0, history=5)
    state = {
        "buffer": tf.constant([1.0, 2.0, 4.0, 8.0, 0.0]),
        "count": tf.constant(4, tf.int64),
    }
    grads = [tf.constant([[6.0, 0.0], [8.0, 0.0]]), tf.constant([0.0])]
    fn = compile_fn(lambda g, n, s: ref.clipped(rule, g, g, n, s), mode)
    out, new = fn(grads, tf.constant(10.0), state)
    # History [1, 2, 4, 8, 10]: 25th percentile = 2.
    assert float(rule.threshold(new)) == 2.0
    want, _ = tf.clip_by_global_norm(grads, 2.0, use_norm=tf.constant(10.0))
    for o, w in zip(out, want):
        np.testing.assert_array_equal(o.numpy(), w.numpy())
    assert new["buffer"].numpy().tolist() == [1.0, 2.0, 4.0, 8.0, 10.0]


def test_first_step_clips_to_its_own_norm(mode):
    rule = AutoClip()
    fn = compile_fn(lambda g, n, s: ref.clipped(rule, [g], [g], n, s), mode)
    grad = tf.constant([3.0, 4.0])
    [out], new = fn(grad, tf.constant(5.0), ref.initial_state(rule))
    assert float(rule.threshold(new)) == 5.0
    np.testing.assert_allclose(out.numpy(), [3.0, 4.0], rtol=1e-7)
    assert int(new["count"]) == 1


def test_non_finite_norm_is_not_appended(mode):
    rule = AutoClip(percentile=50.0, history=4)
    state = {
        "buffer": tf.constant([1.0, 3.0, 2.0, 0.0]),
        "count": tf.constant(3, tf.int64),
    }
    fn = compile_fn(lambda g, n, s: ref.clipped(rule, [g], [g], n, s), mode)
    for bad in [np.nan, np.inf]:
        [out], new = fn(tf.constant([bad, 1.0]), tf.constant(bad, tf.float32), state)
        assert int(new["count"]) == 3
        assert new["buffer"].numpy().tolist() == [1.0, 3.0, 2.0, 0.0]
        assert np.isnan(out.numpy()).all()
    assert float(rule.threshold(state)) == 2.0


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(0, 40),
    st.floats(0.0, 100.0),
    st.lists(st.floats(0, 1e4, width=32), min_size=12, max_size=12),
)
def test_threshold_is_numpy_linear_percentile(history, count, percentile, values):
    rule = AutoClip(percentile=percentile, history=history)
    buffer = np.asarray(values[:history], np.float32)
    state = {"buffer": tf.constant(buffer), "count": tf.constant(count, tf.int64)}
    got = float(rule.threshold(state))
    valid = buffer[: min(count, history)].astype(np.float64)
    if valid.size == 0:
        assert got == np.inf
        return
    want = np.percentile(valid, percentile, method="linear")
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6 * np.ptp(valid))
