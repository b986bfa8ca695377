import numpy as np
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from keras_gradmon.core.histogram import bucket_counts
from tests.conftest import compile_fn
from tests.reference import flush_subnormals, reference_histogram

values_strategy = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=1, max_dims=2, max_side=40),
    elements=st.one_of(
        st.floats(-1e30, 1e30, allow_subnormal=False).map(np.float32),
        st.sampled_from([0.0, 1.0, float("nan"), float("inf")]),
    ),
)


@settings(max_examples=100, deadline=None)
@given(values_strategy, st.integers(1, 40))
def test_matches_tensorboard_convention(values, buckets):
    values = flush_subnormals(values)
    counts, value_range = bucket_counts(tf.constant(values), buckets)
    expected, low, high = reference_histogram(values, buckets)
    finite = np.isfinite(values).sum()
    assert counts.numpy().sum() == finite
    np.testing.assert_allclose(value_range.numpy(), [low, high], rtol=1e-7)
    # An element within float32 rounding of a bucket edge may land on either
    # side of it: the number of elements below each edge must lie between
    # the counts with the edges moved down and up by that rounding.
    below = np.concatenate([[0], np.cumsum(counts.numpy())])[:-1]
    if finite and high > low:
        a = values[np.isfinite(values)].astype(np.float64)
        position = (a - low) / (high - low) * buckets
        edges = np.arange(buckets)
        eps = 1e-5 * buckets
        lo = np.array([(position < e - eps).sum() for e in edges])
        hi = np.array([(position < e + eps).sum() for e in edges])
        assert np.all(lo <= below) and np.all(below <= hi), (counts.numpy(), expected)
    else:
        np.testing.assert_array_equal(counts.numpy(), expected)


def test_exact_counts_on_simple_data(mode):
    fn = compile_fn(lambda x: bucket_counts(x, 4), mode)
    counts, value_range = fn(tf.constant([0.0, 0.1, 0.3, 0.6, 0.99, 1.0, np.nan]))
    assert counts.numpy().tolist() == [2, 1, 1, 2]
    assert value_range.numpy().tolist() == [0.0, 1.0]


def test_single_value_goes_to_last_bucket(mode):
    fn = compile_fn(lambda x: bucket_counts(x, 5), mode)
    counts, value_range = fn(tf.fill([7], 2.5))
    assert counts.numpy().tolist() == [0, 0, 0, 0, 7]
    assert value_range.numpy().tolist() == [2.5, 2.5]


def test_no_finite_values(mode):
    fn = compile_fn(lambda x: bucket_counts(x, 3), mode)
    counts, value_range = fn(tf.constant([np.nan, np.inf]))
    assert counts.numpy().tolist() == [0, 0, 0]
    assert value_range.numpy().tolist() == [0.0, 0.0]


def test_extreme_range_does_not_overflow(mode):
    fn = compile_fn(lambda x: bucket_counts(x, 2), mode)
    counts, _ = fn(tf.constant([-3e38, 3e38, 1.0], tf.float32))
    assert counts.numpy().tolist() == [1, 2]
