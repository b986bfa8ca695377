"""Histograms written inside the train step (a `tf.compat.v1.train`
optimizer under a default writer, the tf-agents way) have the host's
readable rows bit for bit (`histogram_rows.histogram_rows`), also when the
gradients are huge, non-finite or all equal (issue 32, section 2)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import keras_gradmon
from keras_gradmon.histogram_rows import histogram_rows
from tests.reference import histogram_series, load_events, reference_histogram

BUCKETS = 30


def _gradients() -> list[np.ndarray]:
    """Huge with NaN and +-Inf; all equal; only non-finite."""
    rng = np.random.default_rng(0)
    kernel = (rng.uniform(-1, 1, (4, 8)) * 1e30).astype(np.float32)
    kernel[0, 0], kernel[1, 3], kernel[2, 5] = np.nan, np.inf, -np.inf
    return [kernel, np.full(8, 2.5e-3, np.float32), np.full(3, np.nan, np.float32)]


def test_in_graph_rows_are_the_host_rows(tmp_path):
    grads = _gradients()
    variables = [
        tf.Variable(np.linspace(-3, 7, 32, dtype="f4").reshape(4, 8), name="d/kernel"),
        tf.Variable(np.zeros(8, "f4"), name="d/bias"),
        tf.Variable([1.0, 2.0, 3.0], name="scale"),
    ]
    weights = [v.numpy() for v in variables]
    optimizer = keras_gradmon.wrap(
        tf.compat.v1.train.GradientDescentOptimizer(0.0),
        every_n_steps=1,
        histogram_every_n_steps=1,
        histogram_buckets=BUCKETS,
        skip_nonfinite=True,  # the weights stay as they are
    )
    step = tf.function(lambda g: optimizer.apply_gradients(zip(g, variables)))
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        step([tf.constant(g) for g in grads])
    writer.flush()
    events = load_events(str(tmp_path))
    for kind, values in (("grad", grads), ("weight", weights)):
        for path, value in zip(optimizer.monitor.paths, values):
            rows = histogram_series(events, f"{kind}_hist/{path}")[0]
            counts, low, high = reference_histogram(value, BUCKETS)
            want = histogram_rows(counts, np.array([low, high]))
            np.testing.assert_array_equal(
                rows.view(np.uint64), want.view(np.uint64), err_msg=(kind, path)
            )
            edges = np.append(rows[:, 0], rows[-1, 1])
            assert np.all(np.isfinite(edges)) and np.all(np.diff(edges) > 0)
            assert rows[:, 2].sum() == np.isfinite(value).sum()
    kernel = histogram_series(events, f"grad_hist/{optimizer.monitor.paths[0]}")[0]
    edges = np.append(kernel[:, 0], kernel[-1, 1])
    assert all(float(f"{e:.3g}") == e for e in edges), edges
