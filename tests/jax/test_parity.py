"""The monitor on JAX records what it records on TensorFlow: the same
weights and gradients, applied step by step on each backend, give the same
statistics within 1e-5 relative, and the same integer counts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.jax.monitor_side import run, scenario
from tests.jax.processes import run_python

CONFIGS = {
    "every_step": dict(
        every_n_steps=1, histogram_every_n_steps=1, groups={"conv": "v[0-3]"}
    ),
    "skip_nonfinite": dict(every_n_steps=1, skip_nonfinite=True),
    "clipped": dict(
        every_n_steps=2,
        clipping={"method": "global_norm", "max_norm": 1.0},
        skip_nonfinite=True,
    ),
}
#: Integer-valued state: compared exactly.
EXACT = ("count", "steps", "counts", "skipped_steps", "clip_counts")


@pytest.fixture(scope="module")
def data():
    return scenario()


def _tensorflow_side(data: dict, config: dict, tmp_path) -> dict:
    source, target = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(source, config=json.dumps(config), **data)
    run_python(["-m", "tests.jax.monitor_side", str(source), str(target)], "tensorflow")
    return dict(np.load(target))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_state_equals_tensorflow_backend(name, data, tmp_path):
    tf_side = _tensorflow_side(data, CONFIGS[name], tmp_path)
    jax_side = run(data, CONFIGS[name])
    state = sorted(k for k in tf_side if k.startswith("state_"))
    assert state == sorted(k for k in jax_side if k.startswith("state_"))
    for key in state:
        want, got = tf_side[key], jax_side[key]
        if key.endswith(EXACT):
            np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=key)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=0, err_msg=key)
    for key in (k for k in tf_side if k.startswith("variable_")):
        np.testing.assert_array_equal(jax_side[key], tf_side[key], err_msg=key)
    # The scenario's NaN step is recorded.
    values = jax_side["state_stats_values"]
    assert np.isfinite(values).any() and np.isnan(values).any()
