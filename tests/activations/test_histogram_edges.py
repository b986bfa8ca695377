"""Activation histograms stay readable when the outputs explode: the edges
written to the event file are finite, strictly increasing and short, and the
counts are those of the finite outputs (the non-finite ones are counted by
`activation_nonfinite`)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_gradmon import ActivationMonitor
from keras_gradmon.histogram_rows import histogram_rows
from tests.reference import (
    histogram_series,
    load_events,
    reference_histogram,
    scalar_series,
)

BUCKETS = 30


def _exploded(tmp_path) -> tuple[np.ndarray, dict]:
    """A linear layer whose outputs reach ~1e31, with a NaN and an Inf
    input row; its outputs and what the monitor wrote at step 0."""
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, name="boom")], name="net"
    )
    rng = np.random.default_rng(0)
    kernel = rng.uniform(0.5, 1.5, (4, 8)).astype("float32") * 1e15
    model.get_layer("boom").set_weights([kernel, np.full(8, 6.0, "float32")])
    x = rng.uniform(1e15, 1e16, (64, 4)).astype("float32")
    x[0] = 0.0  # a row of zeros: the bias, 6, is the smallest output
    x[5, 2], x[9, 1] = np.nan, np.inf
    monitor = ActivationMonitor(
        model, x, layers=["boom"], histogram_buckets=BUCKETS, log_dir=str(tmp_path)
    )
    monitor.record(0)
    monitor.flush()
    events = load_events(str(tmp_path))
    written = {
        "rows": histogram_series(events, "activation_hist/net/boom")[0],
        "nonfinite": scalar_series(events, "activation_nonfinite/net/boom")[0],
    }
    return np.asarray(model(x)), written


def test_exploding_outputs_give_short_finite_edges(tmp_path):
    y, written = _exploded(tmp_path)
    rows = written["rows"]
    finite = np.isfinite(y.astype(np.float64))
    assert 1e31 < y[finite].max() < 1e32 and y[finite].min() == 6.0
    edges = np.append(rows[:, 0], rows[-1, 1])
    assert np.all(np.isfinite(edges)) and np.all(np.diff(edges) > 0)
    assert np.array_equal(rows[1:, 0], rows[:-1, 1])
    assert all(float(f"{e:.3g}") == e for e in edges), edges
    assert max(len(f"{e:g}") for e in edges) <= 9
    # The counts: the finite outputs, bucketed as the NumPy reference.
    counts, low, high = reference_histogram(y, BUCKETS)
    assert rows[:, 2].tolist() == counts.tolist()
    assert rows[:, 2].sum() == finite.sum() == y.size - 16
    assert written["nonfinite"] == 16  # the NaN row and the Inf row
    assert rows[0, 0] <= low and rows[-1, 1] >= high
    exact = low + (high - low) * np.arange(BUCKETS + 1) / BUCKETS
    width = (high - low) / BUCKETS
    assert np.abs(edges - exact).max() <= 0.1 * width


@pytest.mark.parametrize(
    ("low", "high"),
    [(1.0001, 1.0002), (0.0123456, 2.71828), (-3.4e38, 3.4e38), (-7.0, -6.5)],
)
def test_edges_are_as_short_as_the_range_allows(low, high):
    value_range = np.array([low, high], np.float32)
    rows = histogram_rows(np.arange(BUCKETS), value_range)
    edges = np.append(rows[:, 0], rows[-1, 1])
    lo, hi = value_range.astype(np.float64)
    assert np.all(np.isfinite(edges)) and np.all(np.diff(edges) > 0)
    assert edges[0] <= lo and edges[-1] >= hi
    exact = lo + (hi - lo) * np.arange(BUCKETS + 1) / BUCKETS
    assert np.abs(edges - exact).max() <= 0.1 * (hi - lo) / BUCKETS
    assert rows[:, 2].tolist() == list(range(BUCKETS))


@pytest.mark.parametrize("value", [0.0, 6.0, -1.8e31, 1.2355e7, 0.25])
def test_equal_values_get_a_range_around_them(value):
    value = float(np.float32(value))
    rows = histogram_rows(
        np.array([0] * (BUCKETS - 1) + [40]), np.array([value, value], np.float32)
    )
    edges = np.append(rows[:, 0], rows[-1, 1])
    assert np.all(np.isfinite(edges)) and np.all(np.diff(edges) > 0)
    assert all(float(f"{e:.4g}") == e for e in edges)  # 30 buckets of 1/30
    # Every value in the bucket that holds it, one of the middle two.
    (held,) = np.flatnonzero((rows[:, 0] <= value) & (value < rows[:, 1]))
    assert held in (BUCKETS // 2 - 1, BUCKETS // 2)
    assert rows[:, 2].tolist() == [0] * held + [40] + [0] * (BUCKETS - held - 1)
    magnitude = 10.0 ** int(np.floor(np.log10(abs(value)))) if abs(value) >= 1 else 1
    assert rows[-1, 1] - rows[0, 0] == pytest.approx(magnitude, rel=0.01)
