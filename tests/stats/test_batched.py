import functools
import itertools
import re

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_gradmon.columns import STATISTICS
from keras_gradmon.core import batched, histogram
from keras_gradmon.core import statistics as registry
from keras_gradmon.core.batched import (
    batched_bucket_counts,
    batched_difference_statistics,
    batched_global_norm,
    batched_statistics,
    stack_statistics,
)
from keras_gradmon.core.histogram import bucket_counts
from tests.conftest import compile_fn
from tests.reference import (
    alone_cases,
    assert_rows_close,
    flush_subnormals,
    hard_cases,
)
from tests.strategies import arrays

# Squares that overflow float32 (1e30, 3e38) or underflow (1e-30), and a
# mean far above the spread (values of 1e4 + small).
scales = st.sampled_from([1.0, 1e30, 1e-30, 1e36, 1e-3])
offsets = st.sampled_from([0.0, 0.0, 1e4])
batches = st.lists(st.tuples(arrays, scales, offsets), min_size=1, max_size=5)


def _scaled(values, scale, offset=0.0):
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        values = (values.astype(np.float64) * scale + offset).astype(np.float32)
    return flush_subnormals(values)


def _run(fn, mode, tensors):
    return compile_fn(fn, mode)(tensors)


@settings(max_examples=80, deadline=None)
@given(batches)
def test_matches_float64_reference(batch):
    held = [_scaled(*item) for item in batch]
    rows = batched_statistics([tf.constant(v) for v in held]).numpy()
    assert_rows_close(rows, held)


@pytest.mark.parametrize("name", registry.registered())
@settings(max_examples=8, deadline=None)
@given(batch=batches)
def test_each_statistic_alone_matches_its_reference(name, batch):
    # Asked alone, a statistic's own `needs` serve it (its careful path too).
    held = [_scaled(*item) for item in batch]
    rows = batched_statistics([tf.constant(v) for v in held], [name])
    assert_rows_close(rows, held, [name])


@pytest.mark.parametrize("mode", ["function", "xla"])
@settings(max_examples=5, deadline=None)
@given(batch=batches)
def test_matches_reference_compiled(mode, batch):
    held = [_scaled(*item) for item in batch]
    rows = _run(batched_statistics, mode, [tf.constant(v) for v in held]).numpy()
    assert_rows_close(rows, held)


_hard_cases = hard_cases  # shared with tests/jax


def test_hard_cases(mode):
    held = _hard_cases()
    rows = _run(batched_statistics, mode, [tf.constant(v) for v in held]).numpy()
    assert_rows_close(rows, held)
    singles = np.stack([stack_statistics(tf.constant(v)).numpy() for v in held])
    # Not std: stack_statistics's is 3x off on the 1e4 + 1e-3 noise tensor.
    same = [i for i, name in enumerate(STATISTICS) if name != "std"]
    np.testing.assert_allclose(rows[:, same], singles[:, same], rtol=2e-5, atol=1e-35)


def test_single_and_many_tensors(mode):
    rng = np.random.default_rng(1)
    many = [rng.normal(size=rng.integers(0, 40)).astype(np.float32) for _ in range(60)]
    for held in ([many[3]], many):
        rows = _run(batched_statistics, mode, [tf.constant(v) for v in held])
        assert_rows_close(rows.numpy(), held)


def test_differences_packed_are_the_statistics_of_the_differences(mode):
    # The update ratios' norms: `a - b` taken between the packed matrices,
    # bit for bit the statistics of each difference, NaN and Inf included.
    rng = np.random.default_rng(2)
    a = [rng.normal(size=rng.integers(0, 40)).astype(np.float32) for _ in range(40)]
    b = [x - np.float32(1e-3) * rng.normal(size=x.shape).astype(np.float32) for x in a]
    a[5][:1], b[6][:1] = np.nan, np.inf
    pairs = [[tf.constant(v) for v in a], [tf.constant(v) for v in b]]
    got = compile_fn(lambda p: batched_difference_statistics(*p), mode)(pairs)
    want = _run(batched_statistics, mode, [tf.constant(x - y) for x, y in zip(a, b)])
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert_rows_close(got.numpy(), [x - y for x, y in zip(a, b)])


def test_large_tensors_alone_match_reference(mode):
    held = alone_cases()
    alone, packed = batched.layout_groups([v.size for v in held])
    assert alone == list(range(len(held) - 1)) and packed == [[len(held) - 1]]
    unpacked = functools.partial(batched_statistics, unpack_large=True)
    rows = _run(unpacked, mode, [tf.constant(v) for v in held]).numpy()
    assert_rows_close(rows, held)
    counts, ranges = _run(
        lambda ts: batched_bucket_counts(ts, 7), mode, [tf.constant(v) for v in held]
    )
    for i, v in enumerate(held):
        expected_counts, expected_range = bucket_counts(tf.constant(v), 7)
        np.testing.assert_array_equal(counts[i], expected_counts)
        np.testing.assert_array_equal(ranges[i], expected_range)


def test_large_tensors_counted_alone(mode):
    # Every large tensor finite: each counted where it lies, without a mask.
    # One NaN or Inf: all of them take the masked pass. The same float32
    # arithmetic either way: the counts of `bucket_counts`.
    cases = alone_cases()
    finite = [v for v in cases if np.isfinite(v).all()]
    assert len(finite) >= 5  # the range near float32's limit, constants, zeros
    unpacked = functools.partial(batched_bucket_counts, buckets=7, unpack_large=True)
    for held in (finite, cases):
        tensors = [tf.constant(v) for v in held]
        counts, ranges = _run(unpacked, mode, tensors)
        singles = _run(lambda ts: [bucket_counts(t, 7) for t in ts], mode, tensors)
        for i, (expected_counts, expected_range) in enumerate(singles):
            np.testing.assert_array_equal(counts[i], expected_counts)
            np.testing.assert_array_equal(ranges[i], expected_range)
        assert counts.dtype == tf.int32 and ranges.dtype == tf.float32


def test_the_shift_is_the_middle_of_the_finite_samples():
    # Each tensor's shift: of its 3 sampled elements, the finite ones sorted,
    # the one at (found - 1) // 2 (0 where none is finite).
    values = [1.5, -2.0, 0.0, 7.0, np.nan, np.inf, -np.inf]
    triples = np.array(list(itertools.product(values, repeat=3)), np.float32)
    layout = batched.static_layout([3] * len(triples))
    matrix, _ = batched.prepare([tf.constant(t) for t in triples])
    shift, found = (t.numpy() for t in batched._shift(matrix, layout))
    for k, triple in enumerate(triples):
        finite = np.sort(triple[np.isfinite(triple)])
        assert found[k] == (len(finite) > 0)
        want = finite[(len(finite) - 1) // 2] if len(finite) else 0.0
        assert shift[k] == want, triple


def test_layout_groups():
    # 1/32 of the elements and a block of 64..2048 dividing the size: alone.
    assert batched.layout_groups([1024, 64, 63, None]) == ([0, 1], [[2], [3]])
    assert batched.layout_groups([64 * 40, 64]) == ([0], [[1]])  # 64 < 2624/32
    assert batched.layout_groups([None]) == ([], [[0]])
    assert [batched.alone_block(n) for n in (0, 96, 128, 3 * 4096)] == [
        None, None, 128, 2048
    ]


# Half precisions compute in float32 beside float32 tensors, float64 makes
# the batch compute in float64 (`compute_dtype`): one case each.
@pytest.mark.parametrize(
    "dtypes", [(tf.float16, tf.bfloat16), (tf.float64,)], ids=["half", "float64"]
)
def test_mixed_dtypes(dtypes, mode):
    rng = np.random.default_rng(2)
    values = [rng.normal(size=s).astype(np.float32) * 300 for s in (7, 40, 1, 5)]
    values[1][3] = np.nan
    odd = [tf.cast(v, dtype) for v, dtype in zip(values, dtypes)]
    tensors = [*odd, *map(tf.constant, values[len(odd) :])]
    held = [tf.cast(t, tf.float64).numpy() for t in tensors]
    rows = _run(batched_statistics, mode, tensors).numpy()
    assert rows.dtype == np.float32
    assert_rows_close(rows, held)


def test_float16_squares_do_not_overflow():
    rows = batched_statistics([tf.fill([1000], tf.constant(60000.0, tf.float16))])
    np.testing.assert_allclose(rows[0, 0], 60000.0 * np.sqrt(1000), rtol=1e-6)


def test_names_subset_and_indexed_slices(mode):
    dense = tf.constant([[1.0, 2.0], [0.0, 0.0], [3.0, -4.0]])
    table = tf.Variable(tf.ones([3, 2]))
    names = ("norm", "nonfinite")

    def statistics(values):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, [0, 2]) * values)
        sparse = tape.gradient(loss, table)  # IndexedSlices, densified: dense
        assert isinstance(sparse, tf.IndexedSlices)
        return batched_statistics([sparse, dense], names)

    rows = compile_fn(statistics, mode)(tf.constant([[1.0, 2.0], [3.0, -4.0]]))
    expected = batched_statistics([dense, dense]).numpy()
    for i, name in enumerate(STATISTICS):
        if name in names:
            np.testing.assert_allclose(rows[:, i], expected[:, i], rtol=1e-6)
        else:
            assert np.isnan(rows[:, i]).all(), name


def test_invalid_arguments():
    with pytest.raises(ValueError, match="Unknown statistic"):
        batched_statistics([tf.ones([2])], ["nrm"])
    assert batched_statistics([]).shape == (0, len(STATISTICS))


def _hlo_opcodes(fn, count: int) -> dict[str, int]:
    tensors = [tf.ones([3 + i % 5, 2]) for i in range(count)]
    hlo = tf.function(fn, jit_compile=True).experimental_get_compiler_ir(tensors)(
        stage="hlo"
    )
    opcodes = re.findall(r"= [^ ]+(?: [^ =]+)*? ([a-z\-]+)\(", hlo)
    # The flatten and concatenation of the inputs grow with their number.
    layout = {"parameter", "reshape", "broadcast", "constant", "concatenate"}
    return {op: opcodes.count(op) for op in set(opcodes) - layout}


@pytest.mark.parametrize(
    "fn",
    [
        lambda ts: batched_statistics(ts),
        lambda ts: batched_bucket_counts(ts, 30),
    ],
)
def test_compiled_program_does_not_grow_with_tensor_count(fn):
    assert _hlo_opcodes(fn, 10) == _hlo_opcodes(fn, 100)


@settings(max_examples=60, deadline=None)
@given(st.lists(arrays, min_size=1, max_size=4), st.integers(1, 40))
def test_bucket_counts_rows(values, buckets):
    held = [_scaled(v, 1e30 if i % 2 else 1.0) for i, v in enumerate(values)]
    counts, ranges = batched_bucket_counts([tf.constant(v) for v in held], buckets)
    for i, v in enumerate(held):
        expected_counts, expected_range = bucket_counts(tf.constant(v), buckets)
        np.testing.assert_array_equal(counts[i], expected_counts)
        np.testing.assert_array_equal(ranges[i], expected_range)


def test_bucket_counts_rows_compiled(mode):
    edges = np.array([0.0, 0.1, 0.3, 0.6, 0.99, 1.0, np.nan], np.float32)
    held = [*_hard_cases(), edges]
    tensors = [tf.constant(v) for v in held]
    counts, ranges = _run(lambda ts: batched_bucket_counts(ts, 7), mode, tensors)
    singles = _run(lambda ts: [bucket_counts(t, 7) for t in ts], mode, tensors)
    for i, (expected_counts, expected_range) in enumerate(singles):
        np.testing.assert_array_equal(counts[i], expected_counts)
        np.testing.assert_array_equal(ranges[i], expected_range)
    assert counts.dtype == tf.int32 and ranges.dtype == tf.float32


@settings(max_examples=60, deadline=None)
@given(st.lists(arrays, min_size=1, max_size=5))
def test_global_norm_is_tf_global_norm_when_finite(values):
    tensors = [tf.constant(np.nan_to_num(v, posinf=1.0, neginf=-2.0)) for v in values]
    norm, finite = batched_global_norm(tensors)
    assert norm.dtype == tf.float64 and bool(finite)
    assert np.float32(norm.numpy()) == tf.linalg.global_norm(tensors).numpy()


def test_global_norm_compiled(mode):
    rng = np.random.default_rng(3)
    tensors = [tf.constant(rng.normal(size=s).astype(np.float32)) for s in (5, 300, 1)]
    norm, finite = _run(batched_global_norm, mode, tensors)
    expected = compile_fn(tf.linalg.global_norm, mode)(tensors)
    assert np.float32(norm.numpy()) == expected.numpy() and bool(finite)


@pytest.mark.parametrize(
    ("values", "expected", "all_finite"),
    [
        ([[3e30], [4e30]], 5e30, True),  # squares overflow float32
        ([[3e38, 3e38], [-3e38]], np.sqrt(3) * 3e38, True),  # above float32's max
        ([[1.0, np.nan], [1e30]], np.nan, False),
        ([[1.0, np.inf], [2.0]], np.inf, False),
        ([[0.0, 0.0]], 0.0, True),
    ],
)
def test_global_norm_overflow_and_nonfinite(values, expected, all_finite, mode):
    tensors = [tf.constant(v, tf.float32) for v in values]
    norm, finite = _run(batched_global_norm, mode, tensors)
    reference = np.sqrt(sum(np.sum(np.float64(np.float32(v)) ** 2) for v in values))
    want = reference if all_finite else expected
    np.testing.assert_allclose(norm.numpy(), want, rtol=1e-12)
    assert bool(finite) == all_finite


def test_global_norm_conventions():
    sparse = tf.IndexedSlices(tf.constant([[3.0], [4.0]]), [0, 0], [5, 1])
    norm, _ = batched_global_norm([None, sparse, tf.constant([0.0], tf.float16)])
    assert float(norm) == 7.0  # dense: duplicates summed (TF's values give 5)
    norm, finite = batched_global_norm([])
    assert float(norm) == 0.0 and bool(finite)
    norm, _ = batched_global_norm([tf.constant([1e200], tf.float64), tf.ones([1])])
    assert float(norm) == 1e200


@pytest.mark.parametrize(
    "function",
    [
        batched.batched_bucket_counts,
        batched.batched_statistics,
        batched.stack_statistics,
        batched.tensor_statistics,
        histogram.bucket_counts,
        batched.batched_global_norm,
        batched.combine_norms,
    ],
    ids=lambda f: f.__name__,
)
def test_autograph_converts_every_statistic(function):
    # tf-agents traces with AutoGraph on in places (and the activation
    # monitor does): a function it cannot convert prints a warning that
    # asks users to report a TensorFlow bug. (A walrus once did that.)
    tf.autograph.to_graph(function)
