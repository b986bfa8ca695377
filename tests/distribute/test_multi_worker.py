"""MultiWorkerMirroredStrategy: two worker processes on 127.0.0.1, started and
stopped here (bounded in time), each with one CPU replica."""

from __future__ import annotations

import glob
import os
import pathlib
import pickle

import numpy as np
import pytest

from tests import prestart
from tests.distribute import process
from tests.distribute.numpy_mlp import global_norm, mlp_gradients
from tests.distribute.runner import CLIP
from tests.distribute.scenarios import GLOBAL_BATCH, loop_run
from tests.helpers import data
from tests.reference import load_events, scalar_series


def _start(folder: str):
    ports = ",".join(str(p) for p in process.free_ports(2))
    return [
        process.start("tests.distribute.runner", "worker", folder, str(i), ports)
        for i in range(2)
    ]


prestart.register(__name__, _start)  # runs beside the tests before these


@pytest.fixture(scope="module")
def workers():
    runners, folder = prestart.take(__name__, _start)
    process.finish(runners, timeout=240)
    out = pathlib.Path(folder)
    results = []
    for i in range(2):
        with open(out / f"worker{i}.pkl", "rb") as f:
            results.append(pickle.load(f))
    return results, str(out / "logs")


def test_both_workers_record_the_norm_of_the_summed_gradient(workers):
    (chief, other), _ = workers
    x, y = data(n=64)
    assert [s.step for s in chief["snapshots"]] == [0, 1, 2, 3]
    for attempt, (mine, theirs) in enumerate(
        zip(chief["snapshots"], other["snapshots"])
    ):
        np.testing.assert_equal(mine.totals, theirs.totals)  # same on both workers
        batch = slice(attempt * GLOBAL_BATCH, (attempt + 1) * GLOBAL_BATCH)
        grads = mlp_gradients(chief["weights_before"][attempt], x[batch], y[batch])
        norm = global_norm(grads)
        np.testing.assert_allclose(mine.totals["grad_norm"], norm, rtol=1e-5)
        np.testing.assert_allclose(mine.totals["clip_pre_norm"], norm, rtol=1e-5)
        assert norm > CLIP["clipping"]["max_norm"]


def test_weights_match_a_one_device_run_on_the_global_batch(workers):
    (chief, other), _ = workers
    single = loop_run(None, CLIP)
    assert chief["iterations"] == other["iterations"] == single["iterations"] == 4
    for a, b, c in zip(chief["final"], other["final"], single["final"]):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
    for mine, theirs in zip(chief["snapshots"], single["snapshots"]):
        np.testing.assert_allclose(
            mine.totals["grad_norm"], theirs.totals["grad_norm"], rtol=1e-5
        )


def test_only_the_chief_writes(workers):
    (chief, other), log_dir = workers
    assert chief["writes"] and not other["writes"]
    # Both were given the same directory; one event file, the chief's.
    assert len(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))) == 1
    series = scalar_series(load_events(log_dir), "grad_norm/global")
    assert sorted(series) == [0, 1, 2, 3]
    expected = [s.totals["grad_norm"] for s in chief["snapshots"]]
    np.testing.assert_allclose([series[i] for i in range(4)], expected, rtol=1e-7)
