"""Statistics of tensors whose shape is known only at run time (issue 19):
an `Embedding`'s `tf.IndexedSlices` passed into a `tf.function`, an
`input_signature` of unknown dims, `reduce_retracing` relaxing shapes."""

import functools
from collections import Counter

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings

from keras_gradmon.columns import STATISTICS
from keras_gradmon.core.batched import (
    batched_bucket_counts,
    batched_global_norm,
    batched_statistics,
    dynamic_layout,
    static_layout,
)
from keras_gradmon.core.histogram import bucket_counts
from tests.reference import (
    assert_statistics_close,
    reference_histogram,
    reference_statistics,
)
from tests.stats.test_batched import _hard_cases, _scaled, batches


def _unknown(fn, tensors, rank=None):
    """`fn(tensors)` traced with every shape unknown (rank too, by default)."""
    return _traced(fn, tuple(t.dtype for t in tensors), rank)(tensors)


@functools.cache
def _traced(fn, dtypes, rank):
    """One trace per function, dtypes and rank: its shapes are unknown, so
    the hypothesis examples of one length and dtypes all run the same one."""
    shape = None if rank is None else [None] * rank
    spec = [[tf.TensorSpec(shape, dtype) for dtype in dtypes]]
    return tf.function(fn, input_signature=spec, autograph=False)


def _check_rows(rows, held) -> None:
    assert rows.shape == (len(held), len(STATISTICS))
    for row, values in zip(rows, held):
        assert_statistics_close(
            dict(zip(STATISTICS, row)), reference_statistics(values)
        )


@pytest.mark.parametrize(
    "sizes",
    [[0], [5], [0, 0, 3], [7, 4000, 1, 0, 130], [10**6], [200] * 40, [3, 10**7]],
)
def test_dynamic_layout_is_the_static_one(sizes):
    static = static_layout(sizes)
    dynamic = dynamic_layout([tf.constant(s) for s in sizes])
    assert dynamic.count == static.count == len(sizes)
    assert int(dynamic.block) == static.block
    for field in ("sizes", "pads", "samples", "segments"):
        got = getattr(dynamic, field).numpy()
        np.testing.assert_array_equal(got, getattr(static, field), err_msg=field)


def test_hard_cases_of_unknown_shape():
    held = _hard_cases()
    tensors = [tf.constant(v) for v in held]
    rows = _unknown(batched_statistics, tensors).numpy()
    _check_rows(rows, held)
    # The same layout, computed at run time: the same numbers.
    np.testing.assert_array_equal(rows, batched_statistics(tensors).numpy())


@settings(max_examples=15, deadline=None)
@given(batches)
def test_unknown_shapes_match_float64_reference(batch):
    held = [_scaled(*item) for item in batch]
    rows = _unknown(batched_statistics, [tf.constant(v) for v in held]).numpy()
    _check_rows(rows, held)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float64])
def test_unknown_shapes_of_other_dtypes(dtype):
    rng = np.random.default_rng(5)
    values = [rng.normal(size=s).astype(np.float32) * 300 for s in ((3, 7), (40,))]
    tensors = [tf.cast(values[0], dtype), tf.constant(values[1])]
    held = [tf.cast(t, tf.float64).numpy() for t in tensors]
    rows = _unknown(batched_statistics, tensors, rank=None).numpy()
    _check_rows(rows, held)


def test_static_and_unknown_shapes_keep_their_rows():
    rng = np.random.default_rng(6)
    held = [rng.normal(size=s).astype(np.float32) for s in (3, 50, 0, 9, 4)]
    held[3][2] = np.inf
    held[1][:10] = 0.0
    dynamic = {1, 2, 4}
    spec = [
        tf.TensorSpec([None] if i in dynamic else v.shape) for i, v in enumerate(held)
    ]

    @tf.function(input_signature=[spec], autograph=False)
    def rows(tensors):
        return batched_statistics(tensors), *batched_bucket_counts(tensors, 6)

    statistics, counts, ranges = rows([tf.constant(v) for v in held])
    _check_rows(statistics.numpy(), held)
    for i, values in enumerate(held):
        want, low, high = reference_histogram(values, 6)
        np.testing.assert_array_equal(counts[i], want)
        np.testing.assert_allclose(ranges[i], [low, high], rtol=1e-6)


def test_histograms_of_unknown_shapes():
    held = [*_hard_cases(), np.array([0.0, 0.1, 0.3, 0.6, 0.99, 1.0, np.nan], "f4")]
    tensors = [tf.constant(v) for v in held]
    counts, ranges = _unknown(lambda ts: batched_bucket_counts(ts, 7), tensors)
    for i, t in enumerate(tensors):
        expected_counts, expected_range = bucket_counts(t, 7)
        np.testing.assert_array_equal(counts[i], expected_counts)
        np.testing.assert_array_equal(ranges[i], expected_range)


def _embedding_gradient(ids):
    """The gradient of a gather from a [6, 2] table: IndexedSlices whose
    duplicate indices sum in the dense tensor."""
    table = tf.Variable(tf.reshape(tf.range(12.0), [6, 2]))
    weights = tf.constant([[1.0, -2.0], [0.5, 3.0], [0.0, 0.0], [-1.0, 2.0]])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, ids) * weights[: len(ids)])
    return tape.gradient(loss, table)


def test_indexed_slices_passed_into_a_function_count_as_dense():
    sparse = _embedding_gradient(tf.constant([1, 4, 0, 1]))
    assert isinstance(sparse, tf.IndexedSlices)
    dense = tf.convert_to_tensor(sparse).numpy()
    np.testing.assert_array_equal(dense[1], [0.0, 0.0])  # [1, -2] + [-1, 2]
    assert np.linalg.norm(sparse.values) > np.linalg.norm(dense)

    @tf.function(autograph=False)
    def measure(slices):  # its dense shape is a tensor here
        assert tf.get_static_value(slices.dense_shape) is None
        statistics = batched_statistics([slices, tf.ones([2])])
        counts, ranges = batched_bucket_counts([slices], 5)
        return statistics, counts, ranges, batched_global_norm([slices])

    statistics, counts, ranges, (norm, finite) = measure(sparse)
    _check_rows(statistics.numpy(), [dense, np.ones(2)])
    want, low, high = reference_histogram(dense, 5)
    np.testing.assert_array_equal(counts[0], want)
    np.testing.assert_array_equal(ranges[0], [low, high])
    np.testing.assert_allclose(norm, np.linalg.norm(dense.astype(np.float64)))
    assert bool(finite)


def test_global_norm_of_unknown_shapes():
    held = [np.array([3e30, 4e30], "f4"), np.array([[1.0, 2.0]], "f4")]
    norm, finite = _unknown(batched_global_norm, [tf.constant(v) for v in held])
    want = np.sqrt(sum(np.sum(v.astype(np.float64) ** 2) for v in held))
    np.testing.assert_allclose(norm.numpy(), want, rtol=1e-12)
    assert bool(finite)


def _op_types(count: int) -> Counter:
    spec = [[tf.TensorSpec([None, None])] * count]
    traced = tf.function(batched_statistics, input_signature=spec, autograph=False)
    graph = traced.get_concrete_function().graph
    return Counter(op.type for op in graph.get_operations())


def test_unknown_shapes_share_one_program():
    small, large = _op_types(10), _op_types(100)
    grown = {op for op in large if large[op] != small[op]}
    # Per tensor only its flatten, size and padding (its slice of the pads,
    # packed into a shape): the reductions, the layout and the careful
    # conditional are there once.
    per_tensor = {"Placeholder", "Reshape", "Size", "Fill", "StridedSlice", "Pack"}
    assert grown <= per_tensor | {"Const"}
    conditionals = [n for op, n in large.items() if op.endswith(("Case", "If"))]
    assert conditionals == [1]
