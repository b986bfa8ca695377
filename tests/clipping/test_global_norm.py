import numpy as np
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from keras_gradmon.core.clipping.global_norm import GlobalNormClip
from tests.clipping import _reference as ref
from tests.conftest import compile_fn

SHAPES = [(7, 5), (5,), (3, 3, 2, 4), ()]


def _grads(seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * scale).astype(np.float32) for s in SHAPES]


def _clip(rule, grads, norm, mode="eager"):
    fn = ref.compiled_clip(rule, mode)
    tensors = [tf.constant(g) for g in grads]
    out, state = fn(tensors, tensors, tf.constant(norm, tf.float32), {})
    assert state == {}
    return [o.numpy() for o in out]


def test_bitwise_equal_to_tf_clip_by_global_norm(mode):
    grads = [tf.constant(g) for g in _grads(0, scale=3.0)]
    norm = tf.linalg.global_norm(grads)
    for max_norm in [0.1, 1.0, 2.7, float(norm) * 0.999]:
        want, _ = tf.clip_by_global_norm(grads, max_norm, use_norm=norm)
        got = _clip(GlobalNormClip(max_norm), [g.numpy() for g in grads], norm, mode)
        assert float(norm) > max_norm
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w.numpy())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        hnp.arrays(
            np.float32,
            hnp.array_shapes(min_dims=0, max_dims=3, max_side=6),
            elements=st.floats(-100, 100, width=32, allow_subnormal=False),
        ),
        min_size=1,
        max_size=4,
    ),
    st.floats(1e-3, 1e3),
)
def test_matches_numpy_reference(grads, max_norm):
    norm = ref.global_norm64(grads)
    got = _clip(GlobalNormClip(max_norm), grads, np.float32(norm))
    want = ref.global_norm_clip(grads, max_norm)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6 * max_norm)
    # And tf.clip_by_global_norm computing its own norm, to float tolerance.
    tf_want, _ = tf.clip_by_global_norm([tf.constant(g) for g in grads], max_norm)
    for g, w in zip(got, tf_want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5 * max_norm)


def _no_op_max_norm() -> np.float32:
    # TF multiplies by max_norm * (1 / max_norm), which is not always 1.
    for c in np.arange(100, 10_000, dtype=np.float32) / np.float32(7):
        if c * (np.float32(1) / c) != np.float32(1):
            return c
    raise AssertionError("no such float32")


def test_no_op_below_max_norm_returns_input_unchanged(mode):
    max_norm = _no_op_max_norm()
    grads = _grads(1)
    norm = tf.linalg.global_norm([tf.constant(g) for g in grads])
    assert float(norm) < max_norm
    got = _clip(GlobalNormClip(float(max_norm)), grads, norm, mode)
    for g, x in zip(got, grads):
        np.testing.assert_array_equal(g, x)
    # This max_norm does exercise the case where TF is not the identity.
    tf_out, _ = tf.clip_by_global_norm([tf.constant(g) for g in grads], max_norm)
    assert any(not np.array_equal(t.numpy(), x) for t, x in zip(tf_out, grads))


def test_non_finite_norm_gives_nan_like_tf(mode):
    grads = _grads(2)
    for norm in [np.inf, np.nan]:
        got = _clip(GlobalNormClip(1.0), grads, norm, mode)
        want, _ = tf.clip_by_global_norm(
            [tf.constant(g) for g in grads], 1.0, use_norm=tf.constant(norm)
        )
        for g, w in zip(got, want):
            assert np.isnan(g).all() and np.isnan(w.numpy()).all()


def test_half_precision_is_scaled_in_float32(mode):
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal((64, 32)).astype(np.float32)]
    norm = np.float32(ref.global_norm64(grads))
    scale = np.float32(1) * (np.float32(1) / norm)  # TF's scale, max_norm = 1
    fn = ref.compiled_clip(GlobalNormClip(1.0), mode)
    for dtype in [tf.float16, tf.bfloat16, tf.float64]:
        tensors = [tf.cast(g, dtype) for g in grads]
        out, _ = fn(tensors, tensors, tf.constant(norm), {})
        [o], [t] = out, tensors
        assert o.dtype == dtype
        if dtype == tf.float64:
            np.testing.assert_array_equal(o.numpy(), t.numpy() * np.float64(scale))
            continue
        # Scaled in float32 and rounded once...
        once = tf.cast(tf.cast(t, tf.float32) * scale, dtype)
        np.testing.assert_array_equal(o.numpy(), once.numpy())
        # ...which is not what scaling in half precision gives.
        twice = t * tf.cast(scale, dtype)
        assert not np.array_equal(once.numpy(), twice.numpy())
        np.testing.assert_allclose(
            np.float64(tf.cast(o, tf.float64)),
            ref.global_norm_clip(grads, 1.0)[0],
            rtol=8e-3,
            atol=1e-3,
        )


def test_scale_by_global_norm_keeps_bits_when_not_clipping(mode):
    from keras_gradmon.core.clipping.base import scale_by_global_norm

    x = tf.constant([1.0, 2.0, 3.0], tf.bfloat16)
    fn = compile_fn(
        lambda g, c: scale_by_global_norm([g], ref.given_norm(10.0), 1.0, c), mode
    )
    [kept] = fn(x, tf.constant(False))
    [scaled] = fn(x, tf.constant(True))
    np.testing.assert_array_equal(kept.numpy(), x.numpy())
    np.testing.assert_allclose(np.float32(scaled), [0.1, 0.2, 0.3], rtol=4e-3)
