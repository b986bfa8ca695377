import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_gradmon.core.clipping.agc import AdaptiveGradientClip, unitwise_axes
from tests.clipping import _reference as ref

# Dense kernel [in, out], bias, Conv2D kernel HWIO, scalar, one-unit kernels,
# multi-head [in, heads, dim], Conv1D [w, in, out], Conv3D DHWIO.
SHAPES = [
    (6, 4),
    (4,),
    (3, 3, 2, 5),
    (),
    (1, 5),
    (5, 1),
    (4, 2, 3),
    (2, 2, 2, 3, 4),
]


def _pair(rng, shape, grad_scale):
    w = rng.standard_normal(shape).astype(np.float32)
    # Per-unit scales put units on both sides of the clipping bound.
    unit_shape = np.shape(ref.unitwise_norm(np.ones(shape)))
    scale = grad_scale * np.exp(rng.normal(0, 1.5, unit_shape))
    g = (
        rng.standard_normal(shape)
        * scale
        * ref.unitwise_norm(w)
        / np.sqrt(np.size(w) / max(np.size(scale), 1))
    )
    return w, g.astype(np.float32)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from(SHAPES),
    st.sampled_from([0.01, 0.1, 1.0]),
    st.sampled_from([1e-3, 1e-1]),
)
def test_matches_nfnets_reference(seed, shape, clipping, eps):
    rng = np.random.default_rng(seed)
    w, g = _pair(rng, shape, clipping)
    if shape and rng.random() < 0.3:
        w[..., 0] = 0.0  # a zero-initialised unit: bounded by clipping * eps
    rule = AdaptiveGradientClip(clipping=clipping, eps=eps)
    [out], state = ref.clipped(
        rule, [tf.constant(g)], [tf.constant(w)], tf.constant(1.0), {}
    )
    assert state == {}
    want = ref.agc(g, w, clipping, eps)
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-6, atol=1e-30)


def test_every_shape_in_every_mode(mode):
    rng = np.random.default_rng(1)
    pairs = [_pair(rng, s, 0.05) for s in SHAPES]
    rule = AdaptiveGradientClip(clipping=0.05)
    fn = ref.compiled_clip(rule, mode)
    weights = [tf.constant(w) for w, _ in pairs]
    grads = [tf.constant(g) for _, g in pairs]
    out, _ = fn(grads, weights, tf.constant(1.0), {})
    units_clipped = units_kept = 0
    for o, (w, g) in zip(out, pairs):
        want = ref.agc(g, w, 0.05, 1e-3)
        np.testing.assert_allclose(o.numpy(), want, rtol=2e-6, atol=1e-30)
        kept = ref.unitwise_norm(g) <= 0.05 * np.maximum(ref.unitwise_norm(w), 1e-3)
        units_kept += int(np.sum(kept))
        units_clipped += int(np.sum(~kept))
        # Unclipped units are returned bit for bit.
        np.testing.assert_array_equal(
            o.numpy()[np.broadcast_to(kept, g.shape)],
            g[np.broadcast_to(kept, g.shape)],
        )
    assert units_clipped >= 5 and units_kept >= 5


def test_clipped_unit_norm_is_the_bound():
    # Dense kernel [in=2, out=3]: one unit per output column.
    w = tf.constant([[3.0, 0.0, 1.0], [4.0, 0.0, 0.0]])
    g = tf.constant([[0.0, 1.0, 0.01], [2.0, 0.0, 0.0]])
    [out], _ = ref.clipped(AdaptiveGradientClip(clipping=0.1), [g], [w], 0.0, {})
    np.testing.assert_allclose(
        out.numpy(), [[0.0, 1e-4, 0.01], [0.5, 0.0, 0.0]], rtol=1e-6
    )


def test_unitwise_axes_follow_keras_layouts():
    assert unitwise_axes(tf.TensorShape([])) is None
    assert unitwise_axes(tf.TensorShape([7])) is None
    assert unitwise_axes(tf.TensorShape([1, 7])) is None
    assert unitwise_axes(tf.TensorShape([7, 3])) == [0]
    assert unitwise_axes(tf.TensorShape([7, 2, 3])) == [0]
    assert unitwise_axes(tf.TensorShape([3, 3, 2, 8])) == [0, 1, 2]
    assert unitwise_axes(tf.TensorShape([2, 3, 3, 2, 8])) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="known rank"):
        unitwise_axes(tf.TensorShape(None))


def test_one_weight_per_gradient():
    with pytest.raises(ValueError, match="one weight per gradient"):
        ref.clipped(AdaptiveGradientClip(), [tf.ones([2])], [], 1.0, {})
