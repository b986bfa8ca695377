"""MirroredStrategy with two replicas (two logical CPUs, in a process of their
own): the monitor measures and clips the gradient that is applied, the sum
over replicas, and the summaries are written once."""

from __future__ import annotations

import glob
import os
import pathlib
import pickle

import numpy as np
import pytest

from keras_gradmon.columns import COLUMNS
from tests import prestart
from tests.distribute import process
from tests.distribute.numpy_mlp import global_norm, mlp_gradients
from tests.distribute.runner import CLIP, MIXED_SCALE
from tests.distribute.scenarios import EXAMPLES, GLOBAL_BATCH
from tests.helpers import data
from tests.reference import (
    assert_statistics_close,
    load_events,
    reference_statistics,
    scalar_series,
)

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow

PATHS = ("mlp/hidden/kernel", "mlp/hidden/bias", "mlp/head/kernel", "mlp/head/bias")


def _start(folder: str):
    return process.start("tests.distribute.runner", "mirrored", folder)


prestart.register(__name__, _start)  # runs beside the tests before these


@pytest.fixture(scope="module")
def runs():
    runner, folder = prestart.take(__name__, _start)
    process.finish([runner], timeout=300)
    out = pathlib.Path(folder)
    with open(out / "mirrored.pkl", "rb") as f:
        results = pickle.load(f)
    results["log_dir"] = str(out / "logs")
    return results


def _reference(weights_before: list, attempt: int) -> list[np.ndarray]:
    """The float64 gradient of the global batch of `attempt`."""
    x, y = data(n=EXAMPLES)
    start = GLOBAL_BATCH * (attempt % (EXAMPLES // GLOBAL_BATCH))
    batch = slice(start, start + GLOBAL_BATCH)
    return mlp_gradients(weights_before[attempt], x[batch], y[batch])


def test_global_norm_is_the_norm_of_the_summed_gradient(runs):
    run, single = runs["stats"], runs["stats_single"]
    assert [s.step for s in run["snapshots"]] == list(range(8))
    for attempt, snapshot in enumerate(run["snapshots"]):
        grads = _reference(run["weights_before"], attempt)
        np.testing.assert_allclose(
            snapshot.totals["grad_norm"], global_norm(grads), rtol=1e-5
        )
        np.testing.assert_allclose(
            snapshot.group_grad_norm[0], global_norm(grads[2:]), rtol=1e-5
        )
        np.testing.assert_allclose(
            snapshot.totals["grad_norm"],
            single["snapshots"][attempt].totals["grad_norm"],
            rtol=1e-5,
        )


def test_per_variable_statistics_of_the_summed_gradient(runs):
    run = runs["stats"]
    for attempt in (0, 7):
        snapshot = run["snapshots"][attempt]
        assert snapshot.paths == PATHS
        grads = _reference(run["weights_before"], attempt)
        for i, g in enumerate(grads):
            assert_statistics_close(
                dict(zip(COLUMNS, snapshot.grad[i])), reference_statistics(g), rtol=1e-5
            )
            assert_statistics_close(
                dict(zip(COLUMNS, snapshot.weight[i])),
                reference_statistics(run["weights_before"][attempt][i]),
            )
    histograms = run["histograms"]
    assert histograms.step == 6
    sizes = [w.size for w in run["final"]]
    assert histograms.grad_counts.sum(axis=1).tolist() == sizes


def test_weights_match_the_unwrapped_and_the_one_device_runs(runs):
    run = runs["stats"]
    for mine, plain in zip(run["final"], runs["stats_plain"]["final"]):
        np.testing.assert_array_equal(mine, plain)  # the same single all-reduce
    for mine, single in zip(run["final"], runs["stats_single"]["final"]):
        np.testing.assert_allclose(mine, single, rtol=1e-5, atol=1e-6)
    assert run["iterations"] == runs["stats_plain"]["iterations"] == 8
    # The inner optimizer's all-reduce is switched off only during the step.
    assert not any(runs[name]["replaced_left"] for name in ("stats", "clip", "skip"))


def test_global_norm_clipping_of_the_summed_gradient(runs):
    run, single = runs["clip"], runs["clip_single"]
    max_norm = CLIP["clipping"]["max_norm"]
    for attempt, snapshot in enumerate(run["snapshots"]):
        norm = global_norm(_reference(run["weights_before"], attempt))
        assert norm > max_norm  # every step clips: the test can tell
        np.testing.assert_allclose(snapshot.totals["clip_pre_norm"], norm, rtol=1e-5)
        assert snapshot.totals["clip_post_norm"] == pytest.approx(max_norm)
        assert snapshot.totals["clip_fraction"] == 1.0
    for mine, theirs in zip(run["final"], single["final"]):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


def test_a_nonfinite_gradient_on_one_replica_skips_the_step_everywhere(runs):
    run, single = runs["skip"], runs["skip_single"]
    # Step 1's NaN sits in the last replica's gradient only; the sum has it.
    totals = [s.totals for s in run["snapshots"]]
    assert [t["skipped_steps"] for t in totals] == [0, 1, 1, 1]
    assert totals[1]["grad_nonfinite"] == run["final"][0].size
    assert run["iterations"] == single["iterations"] == 3
    for mine, theirs in zip(run["final"], single["final"]):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)
    assert all(np.isfinite(w).all() for w in run["final"])


def test_summaries_are_written_once(runs):
    files = glob.glob(os.path.join(runs["log_dir"], "events.out.tfevents.*"))
    assert len(files) == 1
    events = load_events(runs["log_dir"])
    written = [e.step for e in events.Tensors("grad_norm/global")]
    assert written == list(range(8))  # one value per step, not one per replica
    expected = [s.totals["grad_norm"] for s in runs["stats"]["snapshots"]]
    series = scalar_series(events, "grad_norm/global")
    np.testing.assert_allclose([series[i] for i in range(8)], expected, rtol=1e-7)
    hists = [e.step for e in events.Tensors(f"grad_hist/{PATHS[0]}")]
    assert hists == [0, 2, 4, 6]


def test_mixed_float16_counts_the_loss_scalers_skips(runs):
    run = runs["mixed"]
    attempts = len(run["snapshots"])
    assert run["skipped"] > 0 and run["iterations"] > 0  # both kinds of step
    assert run["iterations"] + run["skipped"] == attempts
    previous = -1
    for attempt, snapshot in enumerate(run["snapshots"]):
        if snapshot.step == previous:
            continue  # a skipped step: nothing new recorded
        previous = snapshot.step
        totals = snapshot.totals
        assert totals["grad_nonfinite"] == 0  # never reported as an explosion
        # The scaler halved its scale once per skipped step.
        assert totals["loss_scale"] == MIXED_SCALE / 2 ** totals["skipped_steps"]
        # Unscaled, summed over replicas: the float32 model's gradient up to
        # the float16 forward pass.
        norm = global_norm(_reference(run["weights_before"], attempt))
        np.testing.assert_allclose(totals["grad_norm"], norm, rtol=2e-3)
    # Finite weights (Keras's own LossScaleOptimizer, unwrapped, tests
    # finiteness on the first replica's local gradient only).
    assert all(np.isfinite(w).all() for w in run["final"])
    single = runs["mixed_single"]
    assert single["iterations"] + single["skipped"] == attempts


def test_strategy_helpers_outside_a_strategy():
    import tensorflow as tf

    from keras_gradmon.backend import distribute

    grads = [tf.constant([1.0]), None]
    assert all(a is b for a, b in zip(distribute.all_reduce_sum(grads), grads))
    assert distribute.replicas_in_sync() == 1
    assert distribute.writes_summaries(tf.Variable(0.0))
