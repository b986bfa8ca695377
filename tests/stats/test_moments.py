import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from keras_gradmon.columns import STATISTICS
from keras_gradmon.core.batched import stack_statistics, tensor_statistics
from tests.conftest import compile_fn
from tests.reference import (
    assert_statistics_close,
    flush_subnormals,
    reference_statistics,
)

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow

# Subnormals are excluded: TensorFlow flushes them to zero on CPU.
finite_floats = st.floats(
    min_value=-1e3, max_value=1e3, width=32, allow_subnormal=False
)
special = st.sampled_from([0.0, float("nan"), float("inf"), float("-inf")])
arrays = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=1, max_dims=3, max_side=12),
    elements=st.one_of(finite_floats, finite_floats, special),
)
# Scales that overflow float32 when squared (1e30) or underflow (1e-30).
scales = st.sampled_from([1.0, 1e30, 1e-30, 1e36, 1e-3])


def _scaled(values, scale):
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        values = (values.astype(np.float64) * scale).astype(np.float32)
    return flush_subnormals(values)


def _stats(values, mode="eager", dtype=tf.float32):
    fn = compile_fn(lambda x: stack_statistics(x), mode)
    out = fn(tf.constant(values, dtype)).numpy()
    return dict(zip(STATISTICS, out.tolist()))


@settings(max_examples=100, deadline=None)
@given(arrays, scales)
def test_matches_float64_reference(values, scale):
    values = _scaled(values, scale)
    assert_statistics_close(_stats(values), reference_statistics(values))


# Each example an XLA compile (its shape's): the float64 reference test
# above explores the values; these show the compiled reductions agree.
@settings(max_examples=5, deadline=None)
@given(arrays, scales)
def test_matches_reference_under_xla(values, scale):
    values = _scaled(values, scale)
    assert_statistics_close(_stats(values, "xla"), reference_statistics(values))


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float64])
@settings(max_examples=30, deadline=None)
@given(values=arrays)
def test_low_and_high_precision_inputs(dtype, values):
    # The reference sees exactly the values the low-precision tensor holds.
    with np.errstate(over="ignore", invalid="ignore"):
        held = tf.cast(tf.constant(values), dtype)
    expected = reference_statistics(tf.cast(held, tf.float64).numpy())
    out = tensor_statistics(held)
    assert out["norm"].dtype == tf.float32  # computed in float64 for float64
    assert_statistics_close({k: v.numpy() for k, v in out.items()}, expected)


def test_float16_sum_of_squares_does_not_overflow():
    # 60000^2 overflows float16 (max 65504) but the norm is exact in float32.
    values = np.full([1000], 60000.0, np.float16)
    out = tensor_statistics(tf.constant(values))
    np.testing.assert_allclose(out["norm"].numpy(), 60000.0 * np.sqrt(1000), rtol=1e-6)


def test_large_values_do_not_overflow(mode):
    values = np.full([10_000], 1e36, np.float32)
    values[0] = -3e38
    stats = _stats(values, mode)
    assert_statistics_close(stats, reference_statistics(values))
    assert np.isfinite(stats["norm"])


def test_all_nonfinite_is_reported_not_hidden(mode):
    stats = _stats(np.array([np.nan, np.inf, -np.inf], np.float32), mode)
    assert stats["nonfinite"] == 3
    assert stats["norm"] == 0 and stats["max_abs"] == 0
    assert all(np.isnan(stats[k]) for k in ("mean", "std", "min", "max"))


def test_empty_tensor(mode):
    stats = _stats(np.zeros([0], np.float32), mode)
    assert stats["nonfinite"] == 0 and stats["norm"] == 0
    assert stats["zero_fraction"] == 0


def test_indexed_slices_give_dense_statistics():
    slices = tf.IndexedSlices(
        values=tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
        indices=tf.constant([0, 2, 0]),
        dense_shape=tf.constant([4, 2]),
    )
    dense = tf.convert_to_tensor(slices).numpy()  # duplicates summed
    out = {k: v.numpy() for k, v in tensor_statistics(slices).items()}
    assert_statistics_close(out, reference_statistics(dense))
    assert out["zero_fraction"] == 0.5


def test_known_values():
    out = tensor_statistics(tf.constant([3.0, -4.0, 0.0, float("nan")]))
    assert float(out["norm"]) == 5.0
    assert float(out["nonfinite"]) == 1.0
    assert float(out["zero_fraction"]) == 0.25
    assert float(out["min"]) == -4.0 and float(out["max"]) == 3.0
    np.testing.assert_allclose(float(out["mean"]), -1.0 / 3.0, rtol=1e-7)


SUBSETS = [("norm",), ("norm", "nonfinite"), ("mean",), ("std", "min"), ("max_abs",)]


def test_subsets_compute_only_what_is_asked(mode):
    # Every subset in one function: one trace (one XLA compile) per mode.
    values = np.array([1e30, -2e30, np.nan, 0.0, 3e29], np.float32)
    fn = compile_fn(lambda x: [tensor_statistics(x, names) for names in SUBSETS], mode)
    expected = reference_statistics(values)
    for names, out in zip(SUBSETS, fn(tf.constant(values))):
        assert set(out) == set(names)
        assert_statistics_close(
            {**expected, **{k: v.numpy() for k, v in out.items()}}, expected
        )
        stacked = stack_statistics(tf.constant(values), names).numpy()
        for i, name in enumerate(STATISTICS):
            want = name not in names or np.isnan(expected[name])
            assert np.isnan(stacked[i]) == want, (names, name)


def test_unknown_statistic_is_rejected():
    with pytest.raises(ValueError, match="Unknown statistic 'median'"):
        tensor_statistics(tf.ones([2]), ["norm", "median"])
