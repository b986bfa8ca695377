import numpy as np
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_gradmon.core.batched import combine_norms
from tests.conftest import compile_fn
from tests.reference import flush_subnormals


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0, 1e3, allow_subnormal=False).map(np.float32), max_size=20),
    st.sampled_from([1.0, 1e30, 1e-30]),
)
def test_is_l2_norm_of_all_elements(norms, scale):
    norms = flush_subnormals(np.asarray(norms, np.float64) * scale)
    got = float(combine_norms(tf.constant(norms, tf.float32)))
    want = float(np.sqrt(np.sum(norms.astype(np.float64) ** 2)))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_group_norm_is_not_a_sum_of_norms(mode):
    a, b = tf.constant([3.0, 4.0]), tf.constant([12.0])
    fn = compile_fn(lambda n: combine_norms(n), mode)
    assert float(fn(tf.stack([tf.norm(a), tf.norm(b)]))) == 13.0  # not 17
