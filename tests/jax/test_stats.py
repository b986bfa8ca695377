"""The statistics kernel on the JAX backend, under `jax.jit`: against the
NumPy float64 references, and against the TensorFlow backend."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from keras import ops

from keras_gradmon.columns import STATISTICS
from keras_gradmon.core import batched, histogram
from keras_gradmon.core import statistics as registry
from tests.jax.cases import BUCKETS, NORM_CASES, as_dtype, held, statistic_cases
from tests.jax.processes import run_python
from tests.reference import (
    alone_cases,
    assert_rows_close,
    assert_statistics_close,
    flush_subnormals,
    reference_histogram,
    reference_statistics,
)
from tests.stats import toys
from tests.strategies import arrays

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cases() -> dict[str, np.ndarray]:
    return statistic_cases()


def _tensors(cases: dict) -> list:
    return [as_dtype(name, v, ops) for name, v in cases.items()]


@pytest.fixture(scope="module")
def case_rows(cases) -> np.ndarray:
    """`batched_statistics` of every case, jitted: one compile, shared."""
    return np.asarray(jax.jit(batched.batched_statistics)(_tensors(cases)))


def test_statistics_match_float64_reference(cases, case_rows):
    rows = case_rows
    assert rows.dtype == np.float32 and rows.shape == (len(cases), len(STATISTICS))
    for row, name in zip(rows, cases):
        want = reference_statistics(held(name, cases[name], ops))
        assert_statistics_close(dict(zip(STATISTICS, row)), want)


def test_large_tensors_alone_match_reference():
    # Each its own matrix, reduced without a mask; a non-finite element
    # takes the masked pass.
    values = alone_cases()
    assert batched.layout_groups([v.size for v in values])[0] == list(
        range(len(values) - 1)
    )
    compute = jax.jit(lambda ts: batched.batched_statistics(ts, unpack_large=True))
    rows = compute([jnp.asarray(v) for v in values])
    assert_rows_close(np.asarray(rows), values)


def test_a_large_tensor_alone_is_reduced_without_a_scatter():
    # Outside the conditional that falls back to the masked pass, a tensor
    # that is its own matrix is reduced by plain reductions: a segment sum
    # would be a scatter, with a buffer to fill and copy first.
    big = jnp.asarray(np.random.default_rng(0).normal(size=(512, 512)), "float32")
    compute = jax.jit(lambda t: batched.batched_statistics([t], unpack_large=True))
    text = compute.lower(big).compile().as_text()
    entry = text[text.index("\nENTRY") :]
    entry = entry[: entry.index("\n}")]
    assert " scatter(" not in entry and "wrapped_scatter" not in entry
    assert " sort(" not in entry  # the shift: a median of 3 without a sort
    assert_rows_close(np.asarray(compute(big)), [np.asarray(big)])


def test_large_tensors_counted_alone_as_packed():
    # Unmasked where every element is finite, the masked pass else: the same
    # float32 arithmetic either way, so the same counts as `bucket_counts`.
    cases = alone_cases()
    finite = [v for v in cases if np.isfinite(v).all()]
    count = jax.jit(lambda ts: batched.batched_bucket_counts(ts, 7, unpack_large=True))
    for values in (finite, cases):
        counts, ranges = count([jnp.asarray(v) for v in values])
        for i, v in enumerate(values):
            want_counts, want_range = histogram.bucket_counts(jnp.asarray(v), 7)
            np.testing.assert_array_equal(counts[i], want_counts)
            np.testing.assert_array_equal(ranges[i], want_range)


batches = st.lists(
    st.tuples(arrays, st.sampled_from([1.0, 1e30, 1e-30, 1e36])),
    min_size=1,
    max_size=4,
)


def _scaled(batch) -> list[np.ndarray]:
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        return [flush_subnormals(v.astype("f8") * k) for v, k in batch]


@settings(max_examples=10, deadline=None)  # each example a compile
@given(batches)
def test_random_batches_match_float64_reference(batch):
    values = _scaled(batch)
    rows = jax.jit(batched.batched_statistics)([jnp.asarray(v) for v in values])
    assert_rows_close(rows, values)


@pytest.mark.parametrize("name", registry.registered())
@settings(max_examples=2, deadline=None)  # each example a compile
@given(batch=batches)
@example(batch=[(np.array([3e30, -4e30, 0.0, 1.0], "f4"), 1.0)])  # squares overflow
def test_each_statistic_alone_matches_its_reference(name, batch):
    # Asked alone, a statistic's own `needs` serve it (its careful path too:
    # the example, in every run).
    values = _scaled(batch)
    compute = jax.jit(lambda ts: batched.batched_statistics(ts, [name]))
    assert_rows_close(compute([jnp.asarray(v) for v in values]), values, [name])


def test_a_statistic_in_one_module_joins_the_batched_program(cases, case_rows):
    held_values = [held(name, v, ops) for name, v in cases.items()]
    alone = case_rows
    with toys.registered():
        compute = jax.jit(lambda ts: batched.batched_statistics(ts, toys.NAMES))
        toys.assert_toy_rows(compute(_tensors(cases)), alone, held_values)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_inputs(dtype):
    rng = np.random.default_rng(2)
    values = [(rng.normal(size=s) * 300).astype("f4") for s in (7, 40, 1)]
    tensors = [ops.cast(values[0], dtype), *map(jnp.asarray, values[1:])]
    rows = np.asarray(jax.jit(batched.batched_statistics)(tensors))
    for row, t in zip(rows, tensors):
        want = reference_statistics(np.asarray(t, np.float64))
        assert_statistics_close(dict(zip(STATISTICS, row)), want)


def test_float16_squares_do_not_overflow():
    rows = batched.batched_statistics([jnp.full([1000], 60000.0, jnp.float16)])
    np.testing.assert_allclose(rows[0, 0], 60000.0 * np.sqrt(1000), rtol=1e-6)


def test_names_subset_and_single_tensor(cases, case_rows):
    names = ("norm", "nonfinite")
    rows = jax.jit(lambda ts: batched.batched_statistics(ts, names))(_tensors(cases))
    full = case_rows  # eager, the empty batch below and float16 above
    for i, name in enumerate(STATISTICS):
        if name in names:
            np.testing.assert_allclose(rows[:, i], full[:, i], rtol=1e-6)
        else:
            assert np.isnan(rows[:, i]).all(), name
    one = jax.jit(batched.tensor_statistics)(jnp.asarray([3.0, -4.0, 0.0, np.nan]))
    assert float(one["norm"]) == 5.0 and float(one["zero_fraction"]) == 0.25
    assert batched.batched_statistics([]).shape == (0, len(STATISTICS))


def test_bucket_counts_are_exact(cases):
    rng = np.random.default_rng(7)
    values = [rng.normal(size=s).astype("f4") for s in (1, 50, 3000)]
    values += [cases["hard0"], cases["hard9"], cases["hard7"], cases["hard5"]]
    values.append(np.array([0.0, 0.1, 0.3, 0.6, 0.99, 1.0, np.nan], "f4"))
    tensors = [jnp.asarray(v) for v in values]
    counts, ranges = jax.jit(lambda ts: batched.batched_bucket_counts(ts, 4))(tensors)
    assert counts.dtype == jnp.int32 and ranges.dtype == jnp.float32
    single = jax.jit(lambda t: histogram.bucket_counts(t, 4))
    for i, v in enumerate(values):
        want, low, high = reference_histogram(v, 4)
        np.testing.assert_array_equal(counts[i], want)
        np.testing.assert_array_equal(ranges[i], np.float32([low, high]))
        one_counts, one_range = single(tensors[i])
        np.testing.assert_array_equal(one_counts, counts[i])
        np.testing.assert_array_equal(one_range, ranges[i])
    assert np.asarray(counts[-1]).tolist() == [2, 1, 1, 2]


def test_bucket_counts_of_values_near_float32_max():
    values = np.array([3.4e38, -3.4e38, 1.7e38, 0.0, np.inf], "f4")
    count = jax.jit(lambda t: histogram.bucket_counts(t, 4))
    counts, ranges = count(jnp.asarray(values))
    assert np.asarray(counts).tolist() == [1, 0, 1, 2]
    np.testing.assert_array_equal(ranges, np.float32([-3.4e38, 3.4e38]))


@pytest.mark.parametrize(
    ("values", "expected", "all_finite"),
    [
        ([[3e30], [4e30]], 5e30, True),  # squares overflow float32
        ([[1.0, np.nan], [1e30]], np.nan, False),
        ([[1.0, np.inf], [2.0]], np.inf, False),
        ([[0.0, 0.0]], 0.0, True),
        ([[1.5, -2.0, 3.0], [0.25]], np.sqrt(15.3125), True),
    ],
)
def test_global_norm(values, expected, all_finite):
    tensors = [jnp.asarray(v, jnp.float32) for v in values]
    norm, finite = jax.jit(batched.batched_global_norm)(tensors)
    np.testing.assert_allclose(np.asarray(norm), expected, rtol=1e-6)
    assert bool(finite) == all_finite


def test_global_norm_conventions():
    norm, finite = batched.batched_global_norm([])
    assert float(norm) == 0.0 and bool(finite)
    tensors = [None, jnp.asarray([3.0], jnp.float16), jnp.asarray([[4.0]])]
    norm, finite = jax.jit(batched.batched_global_norm)(tensors)
    assert float(norm) == 5.0 and bool(finite)
    # Without jax_enable_x64 the widest float is float32: this norm is inf.
    norm, _ = batched.batched_global_norm([jnp.asarray([3e38, 3e38])])
    assert norm.dtype == jnp.float32 and np.isinf(norm)


def test_combine_norms():
    values = np.array([3e30, 4e30, 0.0, 12e30], "f4")
    got = jax.jit(batched.combine_norms)(jnp.asarray(values))
    np.testing.assert_allclose(got, np.sqrt(np.sum(values.astype("f8") ** 2)), 1e-6)
    assert float(batched.combine_norms(jnp.zeros([0]))) == 0.0


def _primitives(jaxpr, found: list) -> list:
    for equation in jaxpr.eqns:
        found.append(equation.primitive.name)
        for value in equation.params.values():
            inner = getattr(value, "jaxpr", value)
            for branch in value if isinstance(value, (tuple, list)) else [inner]:
                branch = getattr(branch, "jaxpr", branch)
                if hasattr(branch, "eqns"):
                    _primitives(branch, found)
    return found


def _program(fn, count: int) -> dict:
    tensors = [jnp.ones([3 + i % 5, 2]) for i in range(count)]
    names = _primitives(jax.make_jaxpr(fn)(tensors).jaxpr, [])
    # The flatten and concatenation of the inputs grow with their number.
    layout = {"reshape", "broadcast_in_dim", "concatenate", "convert_element_type"}
    return {op: names.count(op) for op in set(names) - layout}


@pytest.mark.parametrize(
    "fn",
    [batched.batched_statistics, lambda ts: batched.batched_bucket_counts(ts, 30)],
)
def test_program_does_not_grow_with_tensor_count(fn):
    assert _program(fn, 10) == _program(fn, 100)


def test_careful_path_is_a_real_conditional():
    program = _program(batched.batched_statistics, 3)
    assert program["cond"] == 1
    # The rows float32 cannot be trusted with, recomputed in the taken branch.
    rows = jax.jit(batched.batched_statistics)([jnp.asarray([3e30, 4e30])])
    np.testing.assert_allclose(rows[0, 0], 5e30, rtol=1e-6)


def test_parity_with_tensorflow_backend(cases, case_rows, tmp_path):
    source, target = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(source, **cases)
    run_python(["-m", "tests.jax.tf_side", str(source), str(target)], "tensorflow")
    tensors = _tensors(cases)
    rows = case_rows
    counts, ranges = jax.jit(lambda ts: batched.batched_bucket_counts(ts, BUCKETS))(
        tensors
    )
    norm, _ = jax.jit(batched.batched_global_norm)(
        [as_dtype(n, cases[n], ops) for n in NORM_CASES]
    )
    with np.load(target) as data:
        tf_side = {name: data[name] for name in data.files}
    want = tf_side["rows"]
    scale = np.abs(want[:, [STATISTICS.index("max_abs")]])
    with np.errstate(invalid="ignore"):  # inf - inf
        close = np.abs(rows - want) <= 1e-5 * np.maximum(np.abs(want), scale)
    same = (rows == want) | (np.isnan(rows) & np.isnan(want))
    assert (close | same).all(), np.argwhere(~(close | same))
    for name in ("nonfinite", "zero_fraction"):  # exact counts
        i = STATISTICS.index(name)
        np.testing.assert_array_equal(rows[:, i], want[:, i])
    np.testing.assert_array_equal(np.asarray(counts), tf_side["counts"])
    np.testing.assert_array_equal(np.asarray(ranges), tf_side["ranges"])
    np.testing.assert_allclose(np.asarray(norm), tf_side["norm"], rtol=1e-5)
