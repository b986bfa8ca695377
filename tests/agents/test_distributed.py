"""DqnAgent under MirroredStrategy with two replicas (a process of its own,
see `mirrored_runner.py`): tf-agents trains with `strategy.run(agent.train)`
and the tf_keras wrapper measures, clips and writes the summed gradient."""

from __future__ import annotations

import glob
import os
import pathlib
import pickle

import numpy as np
import pytest

from keras_gradmon.columns import COLUMNS
from tests import prestart
from tests.agents.mirrored_runner import CLIP, STEPS
from tests.distribute import process
from tests.reference import (
    assert_statistics_close,
    load_events,
    reference_statistics,
    scalar_series,
)

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow


def _start(folder: str):
    runner = "tests.agents.mirrored_runner"
    return process.start(runner, folder, TF_USE_LEGACY_KERAS="1")


prestart.register(__name__, _start)  # runs beside the tests before these


@pytest.fixture(scope="module")
def runs():
    runner, folder = prestart.take(__name__, _start)
    process.finish([runner], timeout=300)
    out = pathlib.Path(folder)
    with open(out / "dqn.pkl", "rb") as f:
        results = pickle.load(f)
    results["log_dir"] = str(out / "logs")
    return results


def _norm(grads: dict) -> float:
    return float(
        np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values()))
    )


def test_statistics_and_clipping_of_the_summed_gradient(runs):
    run, single = runs["clip"], runs["clip_single"]
    assert run["steps"] == single["steps"] == STEPS
    for step, (snapshot, grads) in enumerate(
        zip(run["snapshots"], single["reference"])
    ):
        assert snapshot.step == step
        norm = _norm(grads)  # the global batch's gradient, one device
        assert norm > CLIP["clipping"]["max_norm"]
        np.testing.assert_allclose(snapshot.totals["grad_norm"], norm, rtol=1e-5)
        np.testing.assert_allclose(snapshot.totals["clip_pre_norm"], norm, rtol=1e-5)
        assert snapshot.totals["clip_post_norm"] == pytest.approx(1.0)
    first = run["snapshots"][0]
    for i, g in enumerate(single["reference"][0].values()):
        assert_statistics_close(
            dict(zip(COLUMNS, first.grad[i])), reference_statistics(g), rtol=1e-5
        )
    for mine, theirs in zip(run["final"], single["final"]):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


def test_training_is_bit_identical_to_the_unwrapped_agent(runs):
    for mine, plain in zip(runs["stats"]["final"], runs["plain"]["final"]):
        np.testing.assert_array_equal(mine, plain)


def test_in_graph_summaries_are_written_once(runs):
    log_dir = runs["log_dir"]
    assert len(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))) == 1
    events = load_events(log_dir)
    written = [e.step for e in events.Tensors("grad_norm/global")]
    assert written == list(range(STEPS))  # once per step, not once per replica
    series = scalar_series(events, "grad_norm/global")
    expected = [s.totals["grad_norm"] for s in runs["clip"]["snapshots"]]
    np.testing.assert_allclose([series[i] for i in range(STEPS)], expected, rtol=1e-7)
    path = runs["clip"]["snapshots"][0].paths[0]
    assert [e.step for e in events.Tensors(f"grad_hist/{path}")] == [0, 2]
