import csv

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_gradmon
from keras_gradmon import GradientMonitorOptimizer, GradientSummaryCallback
from keras_gradmon.core.state import MonitorState
from keras_gradmon.histogram_rows import histogram_rows
from tests.helpers import LOSS, data, gradients, mlp
from tests.reference import (
    histogram_series,
    load_events,
    reference_histogram,
    reference_statistics,
    scalar_series,
)

PATHS = ["mlp/hidden/kernel", "mlp/hidden/bias", "mlp/head/kernel", "mlp/head/bias"]


def _fit(tmp_path, epochs=1, **options):
    x, y = data(n=64)
    model = mlp()
    expected = gradients(model, x[:16], y[:16])  # step 0's batch
    weights = model.get_weights()
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.05), **options)
    model.compile(optimizer, LOSS, jit_compile=True)
    log_dir = str(tmp_path / "grads")
    history = model.fit(
        x,
        y,
        batch_size=16,
        epochs=epochs,
        shuffle=False,
        verbose=0,
        callbacks=[
            GradientSummaryCallback(log_dir),
            keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
        ],
    )
    return load_events(log_dir), expected, weights, optimizer, history


def _check_variable(step0: dict, path: str, g: np.ndarray, w: np.ndarray) -> None:
    """The step-0 statistics of one variable against the NumPy reference."""
    ref, wref = reference_statistics(g), reference_statistics(w)
    for name in keras_gradmon.STATISTICS:
        # The reference gradient comes from an eager tape, the recorded
        # one from the XLA step: they differ by float32 rounding, a few
        # ulps of the largest element. A mean that cancels to ~0 (the
        # head bias: softmax minus one-hot sums to 0) is only that noise.
        np.testing.assert_allclose(
            step0[f"grad_{name}/{path}"],
            ref[name],
            rtol=2e-5,
            atol=8 * np.finfo(np.float32).eps * ref["max_abs"],
            err_msg=f"grad_{name}/{path}",
        )
        np.testing.assert_allclose(
            step0[f"weight_{name}/{path}"],
            wref[name],
            rtol=2e-6,
            atol=1e-7 * wref["max_abs"],
        )
    if wref["norm"] > 0:
        np.testing.assert_allclose(
            step0[f"grad_to_weight/{path}"], ref["norm"] / wref["norm"], rtol=2e-5
        )
    else:  # zero-initialised bias: no ratio at step 0
        assert f"grad_to_weight/{path}" not in step0


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """2 epochs of 4 steps, statistics every 2 steps, histograms every 3."""
    tmp_path = tmp_path_factory.mktemp("callback")
    return tmp_path, _fit(
        tmp_path,
        epochs=2,
        every_n_steps=2,
        histogram_every_n_steps=3,
        histogram_buckets=10,
        groups={"head": "head"},
    )


def test_event_files_hold_the_reference_statistics(fitted):
    events, grads, weights, _, _ = fitted[1]
    assert scalar_series(events, "grad_norm/global").keys() == {0, 2, 4, 6}
    flat = np.concatenate([g.ravel() for g in grads]).astype(np.float64)
    series = {
        tag: scalar_series(events, tag)
        for tag in events.Tags()["tensors"]
        if "hist" not in tag
    }
    step0 = {tag: s[0] for tag, s in series.items() if 0 in s}
    np.testing.assert_allclose(
        step0["grad_norm/global"], np.linalg.norm(flat), rtol=1e-5
    )
    head = np.concatenate([g.ravel() for g in grads[2:]]).astype(np.float64)
    np.testing.assert_allclose(step0["grad_norm/head"], np.linalg.norm(head), rtol=1e-5)
    for path, g, w in zip(PATHS, grads, weights):
        _check_variable(step0, path, g, w)
    assert step0["grad_nonfinite/global"] == 0 and step0["grad_missing/global"] == 0
    for path, g, w in zip(PATHS, grads, weights):
        series = histogram_series(events, f"grad_hist/{path}")
        assert series.keys() == {0, 3, 6}
        buckets = series[0]
        assert buckets.shape == (10, 3)
        assert buckets[:, 2].sum() == g.size
        counts, low, high = reference_histogram(g, 10)
        # The readable edges of the reference range (`histogram_rows.readable_rows`).
        want = histogram_rows(counts, np.array([low, high]))
        np.testing.assert_array_equal(buckets[:, :2], want[:, :2])
        assert np.abs(np.cumsum(buckets[:, 2] - counts)).max() <= 1
        assert histogram_series(events, f"weight_hist/{path}")[0][:, 2].sum() == w.size


def test_histograms_are_readable_by_the_histogram_plugin(fitted):
    events = fitted[1][0]
    from tensorboard.plugins.histogram import metadata

    for tag in ("grad_hist/mlp/hidden/kernel", "weight_hist/mlp/head/bias"):
        meta = events.SummaryMetadata(tag)
        assert meta.plugin_data.plugin_name == metadata.PLUGIN_NAME
    assert (
        events.SummaryMetadata("grad_norm/global").plugin_data.plugin_name == "scalars"
    )


def test_global_norm_goes_to_keras_logs(fitted):
    tmp_path, (_, _, _, optimizer, history) = fitted
    norms = history.history["grad_norm"]
    assert len(norms) == 2
    # The last batch (step 7) keeps step 6's value: the latest snapshot.
    assert optimizer.snapshot().step == 6
    assert norms[-1] == pytest.approx(optimizer.snapshot().totals["grad_norm"])
    assert norms[0] != pytest.approx(norms[1])
    with open(tmp_path / "log.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["grad_norm"]) for r in rows] == pytest.approx(norms)


def test_tag_scope_and_statistic_selection(tmp_path):
    events, *_ = _fit(
        tmp_path,
        every_n_steps=1,
        histogram_every_n_steps=None,
        tag_scope="actor",
        statistics=["norm", "max_abs"],
        weight_statistics=False,
    )
    tags = set(events.Tags()["tensors"])
    assert "grad_norm/actor/global" in tags
    assert "grad_max_abs/actor/mlp/head/kernel" in tags
    assert not any(t.startswith(("grad_mean", "weight_", "grad_hist")) for t in tags)


def test_reads_from_the_device_only_when_a_summary_is_due(tmp_path, monkeypatch):
    calls = []
    for name in ("capture_scalars", "counts"):  # every read of the state
        original = getattr(MonitorState, name)
        monkeypatch.setattr(
            MonitorState,
            name,
            lambda self, _original=original: calls.append(1) or _original(self),
        )
    x, y = data(n=160)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.05), every_n_steps=4, histogram_every_n_steps=None
    )
    model.compile(optimizer, LOSS)
    callback = GradientSummaryCallback(str(tmp_path))
    for _ in range(2):  # repeated fits resume at step 10, 20
        model.fit(x, y, batch_size=16, verbose=0, callbacks=[callback])
    # Due batches: steps 0, 4, 8 then 12, 16 (a capture each); plus a look
    # at the steps at epoch end and train end (nothing fresh then).
    assert len(calls) == 3 + 2 + 2 * 2
    steps = scalar_series(load_events(str(tmp_path)), "grad_norm/global").keys()
    assert steps == {0, 4, 8, 12, 16}


def test_custom_loop_write_summaries(tmp_path):
    x, y = data(n=48)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.05), every_n_steps=2, histogram_every_n_steps=None
    )
    writer = tf.summary.create_file_writer(str(tmp_path))

    @tf.function(jit_compile=True)
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = LOSS(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    written = []
    for i in range(3):
        train_step(x[16 * i : 16 * (i + 1)], y[16 * i : 16 * (i + 1)])
        written.append(keras_gradmon.write_summaries(optimizer, writer))
    assert written == [True, False, True]
    writer.flush()
    series = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    assert series.keys() == {0, 2}
    assert series[2] == pytest.approx(optimizer.snapshot().totals["grad_norm"])


def test_callback_needs_a_monitored_optimizer(tmp_path):
    x, y = data(n=16)
    model = mlp()
    model.compile(keras.optimizers.SGD(), LOSS)
    with pytest.raises(
        ValueError, match=r"Expected an optimizer monitored by keras_gradmon"
    ):
        model.fit(x, y, verbose=0, callbacks=[GradientSummaryCallback(str(tmp_path))])


def test_callback_needs_exactly_one_destination():
    with pytest.raises(ValueError, match=r"exactly one of `log_dir` and `writer`"):
        GradientSummaryCallback()


def test_steps_per_execution_writes_each_summary(tmp_path):
    x, y = data(n=256)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.05), every_n_steps=4, histogram_every_n_steps=None
    )
    model.compile(optimizer, LOSS, steps_per_execution=4, jit_compile=True)
    model.fit(
        x,
        y,
        batch_size=16,
        epochs=1,
        verbose=0,
        callbacks=[GradientSummaryCallback(str(tmp_path))],
    )
    series = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    assert sorted(series) == [0, 4, 8, 12]


def test_read_every_reads_every_few_steps_and_loses_none(tmp_path):
    """Ten steps with a summary at each, read every 4 steps: every summary
    is written, and the Keras logs hold the newest one read (steps 0, 4
    and 8) until the next read."""
    x, y = data(n=160)
    model = mlp()
    model.compile(
        GradientMonitorOptimizer(
            keras.optimizers.SGD(0.05), every_n_steps=1, histogram_every_n_steps=None
        ),
        LOSS,
        jit_compile=True,
    )
    logged: list = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: logged.append(logs["grad_norm"])
    )
    callback = keras_gradmon.GradientMonitorCallback(
        str(tmp_path), alerts=False, read_every=4
    )
    model.fit(
        x, y, batch_size=16, shuffle=False, verbose=0, callbacks=[callback, record]
    )
    written = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    assert sorted(written) == list(range(10))
    assert len(set(written.values())) == 10
    assert logged == [written[step - step % 4] for step in range(10)]


def test_read_every_must_be_a_positive_int():
    with pytest.raises(ValueError, match=r"read_every.*Received: read_every=0"):
        keras_gradmon.GradientMonitorCallback("logs", read_every=0)
