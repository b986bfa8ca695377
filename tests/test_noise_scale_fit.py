"""The gradient noise scale end to end: `model.fit` on a linear regression
whose B_simple is known in closed form, its parts the micro-batches of the
inner optimizer's `gradient_accumulation_steps` (here, on TensorFlow and,
imported by `tests/jax`, on JAX) or the replicas of a `MirroredStrategy`
(`tests/noise_side.py`, in a process of its own)."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from keras_gradmon import GradientMonitorOptimizer, GradientSummaryCallback
from tests import prestart
from tests.reference import load_events, scalar_series
from tests.signals.linear_regression import LinearRegression, empirical_b_simple

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow

PROBLEM = LinearRegression(dim=4, noise_std=1.0, distance=1.0)
PARTS, PART_BATCH = 4, 8


def _totals(optimizer) -> dict[str, float]:
    totals = optimizer.snapshot().totals
    return {k: float(v) for k, v in totals.items() if k.startswith("noise_")}


def check_against_closed_form(totals: dict, x: np.ndarray, y: np.ndarray) -> None:
    """B_simple within 15% of the data set's own; the ratio to the update's
    batch, |G|^2 and tr(Sigma) of Keras's "mse" (4 times those of 1/2 of
    the squared error) alike."""
    expected = empirical_b_simple(PROBLEM, x, y)
    assert expected == pytest.approx(PROBLEM.b_simple, rel=0.1)
    assert totals["noise_b_simple"] == pytest.approx(expected, rel=0.15)
    ratio = expected / (PARTS * PART_BATCH)
    assert totals["noise_batch_ratio"] == pytest.approx(ratio, rel=0.15)
    assert totals["noise_grad_sq"] == pytest.approx(4 * PROBLEM.grad_sq, rel=0.15)
    assert totals["noise_trace"] == pytest.approx(4 * PROBLEM.trace, rel=0.15)


def test_noise_scale_of_micro_batches_matches_the_closed_form(tmp_path):
    x, y = PROBLEM.dataset(PARTS * PART_BATCH * 1024)
    inner = keras.optimizers.SGD(0.0, gradient_accumulation_steps=PARTS)
    optimizer = GradientMonitorOptimizer(
        inner,
        every_n_steps=256,
        histogram_every_n_steps=None,
        noise_scale={"batch_size": PART_BATCH, "decay": 0.995},
    )
    model = PROBLEM.model()
    model.compile(optimizer, "mse")
    callback = GradientSummaryCallback(str(tmp_path))
    fit = dict(batch_size=PART_BATCH, epochs=1, shuffle=False, verbose=0)
    model.fit(x, y, callbacks=[callback], **fit)
    assert optimizer.snapshot().step == 768  # `iterations` counts updates
    totals = _totals(optimizer)
    check_against_closed_form(totals, x, y)
    written = scalar_series(load_events(str(tmp_path)), "noise_scale/b_simple")
    assert sorted(written) == [0, 256, 512, 768]
    assert written[768] == pytest.approx(totals["noise_b_simple"], rel=1e-6)


def test_noise_scale_is_nan_without_parts():
    x, y = PROBLEM.dataset(256)
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.0), every_n_steps=8, noise_scale=True
    )
    model = PROBLEM.model()
    model.compile(optimizer, "mse")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert all(np.isnan(v) for v in _totals(optimizer).values())


REPLICA_KINDS = ["keras", "tf_keras"]


def _start_replicas(folder: str) -> dict:
    """The replicas' runs, each in a process of its own (`tests/noise_side.py`)."""
    from tests.jax.processes import start_python

    return {
        kind: start_python(["-m", "tests.noise_side", kind], backend="tensorflow")
        for kind in REPLICA_KINDS
    }


if keras.backend.backend() == "tensorflow":  # imported by tests/jax too
    prestart.register(__name__, _start_replicas)  # beside the tests before


@pytest.fixture(scope="module")
def replica_runs() -> dict:
    runs, _ = prestart.take(__name__, _start_replicas)
    yield runs
    for run in runs.values():  # a deselected kind's
        if run.process.poll() is None:
            run.process.kill()


@pytest.mark.parametrize("kind", REPLICA_KINDS)
def test_noise_scale_of_replicas_matches_the_closed_form(kind, request):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("replicas are tf.distribute's")
    out = request.getfixturevalue("replica_runs")[kind].finish()
    totals = json.loads(out.strip().splitlines()[-1])
    x, y = PROBLEM.dataset(PARTS * PART_BATCH * 1024)
    check_against_closed_form(totals, x, y)
