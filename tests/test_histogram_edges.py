"""Gradient and weight histograms stay readable when the values are huge or
non-finite (issue 32, section 2): the rows TensorBoard reads have finite,
strictly increasing, short edges, from one definition
(`histogram_rows.readable_rows`) that the host (`histogram_rows`) runs on NumPy and
the in-graph writer (`batched_histogram_rows_graph`) on TensorFlow ops, bit
for bit the same; checked here against an independent reference in decimal
arithmetic."""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal, localcontext

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_gradmon import GradientMonitorOptimizer, GradientSummaryCallback
from keras_gradmon.histogram_rows import histogram_rows
from keras_gradmon.legacy.graph_writer import batched_histogram_rows_graph
from tests.reference import histogram_series, load_events, reference_histogram

BUCKETS = 30


# The reference: edges rounded in decimal arithmetic -------------------------


def _decimal_edge(value: float, digits: int, how: str) -> float:
    """`value` at `digits` significant digits, rounded `how`, as the double
    nearest that decimal; `how` floor and ceiling: the tightest decimal
    whose double is at most (at least) `value`."""
    if value == 0:
        return 0.0
    with localcontext() as context:
        context.prec = 1000  # exact: a double has fewer than 800 digits
        exact = Decimal(value)
        unit = Decimal(1).scaleb(exact.adjusted() - digits + 1)
        m = (exact / unit).quantize(Decimal(1), rounding=how)
        # The double of the next decimal inward may still hold the value.
        if how == ROUND_FLOOR and float((m + 1) * unit) <= value:
            m += 1
        if how == ROUND_CEILING and float((m - 1) * unit) >= value:
            m -= 1
        return float(m * unit)


def _decade(x: float) -> int:
    """The largest p with 10**p (as the double nearest it) at most `x`."""
    p = Decimal(x).adjusted()
    if float(f"1e{p + 1}") <= x:
        return p + 1
    return p if float(f"1e{p}") <= x else p - 1


def _reference_edges(low: float, high: float, k: int) -> np.ndarray:
    """The edges of docs/tags.md's rule, spelled out with `decimal`."""
    exact = low + (high - low) * (np.arange(k + 1, dtype=np.float64) / k)
    exact[0], exact[-1] = low, high
    tolerance = 0.1 * (high - low) / k
    if 2 * tolerance < 1e-307:
        return exact
    digits = max(3, _decade(max(abs(low), abs(high))) - _decade(2 * tolerance) + 1)
    if digits > 15:
        return exact
    rounded = np.array([_decimal_edge(e, digits, ROUND_HALF_EVEN) for e in exact])
    for end, how in ((0, ROUND_FLOOR), (-1, ROUND_CEILING)):
        rounded[end] = _decimal_edge(exact[end], digits, how)
        if abs(rounded[end] - exact[end]) > tolerance:
            rounded[end] = _decimal_edge(exact[end], min(digits + 1, 15), how)
    fits = np.all(np.abs(rounded - exact) <= tolerance)
    return rounded if fits and np.all(np.diff(rounded) > 0) else exact


def reference_rows(counts: np.ndarray, low: float, high: float) -> np.ndarray:
    """The rows of docs/tags.md's rule, spelled out with `decimal`."""
    k, counts = len(counts), np.asarray(counts, np.float64)
    if not (np.isfinite(low) and np.isfinite(high)):
        low = high = 0.0
    if high <= low:
        magnitude = float(Decimal(1).scaleb(Decimal(low).adjusted()))
        magnitude = magnitude if abs(low) >= 1 else 1.0
        value, low, high = low, low - magnitude / 2, low + magnitude / 2
    else:
        value = None
    edges = _reference_edges(low, high, k)
    if value is not None:
        bucket = int(np.sum(edges[:-1] <= value)) - 1
        counts = np.where(np.arange(k) == bucket, counts.sum(), 0.0)
    return np.stack([edges[:-1], edges[1:], counts], axis=1)


def _ranges() -> np.ndarray:
    """Float32 ranges: huge, tiny, narrow, negative, equal, none, and random
    ones of every magnitude."""
    chosen = [
        (6.0, 1.8e31),
        (-3.4e38, 3.4e38),
        (1.0001, 1.0002),
        (0.0123456, 2.71828),
        (-7.0, -6.5),
        (1e-45, 3e-45),  # subnormal
        (-2.5e30, 9.1e29),
        (0.3, 0.7),
        (0.0, 0.0),  # no finite value
        (6.0, 6.0),
        (-1.8e31, -1.8e31),
        (1.2355e7, 1.2355e7),
        (0.25, 0.25),
    ]
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (150, 2)) * 10.0 ** rng.uniform(-40, 38, (150, 1))
    b = a[:, :1] + np.abs(a[:, :1]) * 10.0 ** rng.uniform(-6, 2, (150, 1))
    random = np.concatenate([a[:, :1], b], 1)
    values = np.concatenate([np.array(chosen), random]).astype(np.float32)
    return np.sort(values, axis=1)


def _counts(n: int) -> np.ndarray:
    return np.random.default_rng(1).integers(0, 50, (n, BUCKETS))


def _shortest(edges: np.ndarray) -> int:
    """The fewest significant digits that print every edge exactly."""
    return next(d for d in range(1, 18) if all(float(f"{e:.{d}g}") == e for e in edges))


def test_host_rows_equal_the_decimal_reference():
    ranges, counts = _ranges(), _counts(len(_ranges()))
    for value_range, row_counts in zip(ranges, counts):
        rows = histogram_rows(row_counts, value_range)
        low, high = value_range.astype(np.float64)
        want = reference_rows(row_counts, low, high)
        np.testing.assert_array_equal(rows, want, err_msg=str(value_range))
        edges = np.append(rows[:, 0], rows[-1, 1])
        assert np.all(np.isfinite(edges)) and np.all(np.diff(edges) > 0)
        assert edges[0] <= low and edges[-1] >= high
        assert rows[:, 2].sum() == row_counts.sum()


@pytest.mark.parametrize(
    ("low", "high", "digits"),
    [(6.0, 1.8e31, 3), (-3.4e38, 3.4e38, 3), (-2.5e30, 9.1e29, 3), (1.0001, 1.0002, 8)],
)
def test_edges_print_short(low, high, digits):
    value_range = np.array([low, high], np.float32)
    edges = histogram_rows(np.ones(BUCKETS), value_range)[:, :2]
    assert _shortest(np.append(edges[:, 0], edges[-1, 1])) == digits


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_graph_rows_are_the_host_rows_bit_for_bit(mode):
    ranges = _ranges()
    counts = _counts(len(ranges))
    rows = batched_histogram_rows_graph
    if mode == "function":
        rows = tf.function(rows, autograph=False)
    ours = rows(tf.constant(counts, tf.int32), tf.constant(ranges)).numpy()
    host = np.stack([histogram_rows(c, r) for c, r in zip(counts, ranges)])
    assert ours.dtype == host.dtype == np.float64
    np.testing.assert_array_equal(ours.view(np.uint64), host.view(np.uint64))


# A fit with huge and non-finite gradients -----------------------------------


class _Spread(keras.layers.Layer):
    """`sum(x[:, j] * w[j, k]) + sum(b)` over the finite products: huge
    inputs give huge gradients; a NaN or Inf input gives a NaN gradient row,
    and the other rows stay finite."""

    def build(self, shape):
        self.w = self.add_weight((shape[-1], 4), initializer="ones", name="w")
        self.b = self.add_weight((4,), initializer="zeros", name="b")

    def call(self, x):
        y = x[:, :, None] * self.w
        y = ops.where(ops.isfinite(y), y, 0.0)
        return ops.sum(y, axis=(1, 2))[:, None] + ops.sum(self.b)


class _Gradients(keras.callbacks.Callback):
    """Each step's gradients and weights, as the step sees them."""

    def __init__(self, x, y, batch):
        super().__init__()
        self.x, self.y, self.batch, self.steps = x, y, batch, []

    def on_train_batch_begin(self, batch, logs=None):
        part = slice(batch * self.batch, (batch + 1) * self.batch)
        with tf.GradientTape() as tape:
            loss = keras.losses.MeanSquaredError()(
                self.y[part], self.model(self.x[part], training=True)
            )
        grads = tape.gradient(loss, self.model.trainable_variables)
        weights = [v.numpy() for v in self.model.trainable_variables]
        self.steps.append(([g.numpy() for g in grads], weights))


@pytest.fixture(scope="module")
def exploded(tmp_path_factory):
    """Three steps of a fit whose first gradients reach 5e30 and +Inf
    (column 5, one input of 1e20) and NaN (columns 6 and 7)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(1e10, 1e11, (48, 8)).astype("float32")
    x[0, 5] = 1e20
    x[3, 6], x[5, 7], x[9, 7] = np.nan, np.inf, -np.inf
    y = np.zeros((48, 1), "float32")
    model = keras.Sequential([keras.Input((8,)), _Spread(name="spread")], name="net")
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(1e-31), every_n_steps=1, histogram_every_n_steps=1
    )
    model.compile(optimizer, keras.losses.MeanSquaredError())
    log_dir = str(tmp_path_factory.mktemp("exploded"))
    seen = _Gradients(x, y, 16)
    model.fit(
        x, y, batch_size=16, shuffle=False, verbose=0,
        callbacks=[seen, GradientSummaryCallback(log_dir)],
    )  # fmt: skip
    return load_events(log_dir), seen.steps, optimizer.monitor.paths


def test_fit_writes_readable_rows_of_the_reference_counts(exploded):
    events, steps, paths = exploded
    grads0 = steps[0][0][0].astype(np.float64)
    assert np.isposinf(grads0[5]).all() and np.isnan(grads0[6:]).all()
    assert 1e30 < np.abs(grads0[:5]).max() < 1e32
    for kind, index in (("grad", 0), ("weight", 1)):
        for i, path in enumerate(paths):
            written = histogram_series(events, f"{kind}_hist/{path}")
            assert sorted(written) == [0, 1, 2]
            for step, rows in written.items():
                values = steps[step][index][i]
                counts, low, high = reference_histogram(values, BUCKETS)
                want = histogram_rows(counts, np.array([low, high]))
                np.testing.assert_array_equal(rows, want, err_msg=(kind, path, step))
                edges = np.append(rows[:, 0], rows[-1, 1])
                assert np.all(np.isfinite(edges)) and np.all(np.diff(edges) > 0)
                assert rows[:, 2].sum() == np.isfinite(values).sum()
                # A fourth digit where 3 would move an edge past a power of
                # ten by more than a tenth of a bucket (0 to 1.26e23).
                assert _shortest(edges) <= 4, edges
    # The huge gradient: 3 digits, and the non-finite elements in no bucket.
    rows = histogram_series(events, f"grad_hist/{paths[0]}")[0]
    assert _shortest(np.append(rows[:, 0], rows[-1, 1])) == 3
    assert rows[:, 2].sum() == grads0.size - 12
