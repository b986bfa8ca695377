"""The monitor on JAX records what it records on TensorFlow: the same
weights and gradients, applied step by step on each backend, give the same
statistics within 1e-5 relative, and the same integer counts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from keras_gradmon.columns import COLUMNS, Layout, Snapshot
from tests.jax.monitor_side import run_all, scenario
from tests.jax.processes import start_python

CONFIGS = {
    "every_step": dict(
        every_n_steps=1, histogram_every_n_steps=1, groups={"conv": "v[0-3]"}
    ),
    "skip_nonfinite": dict(every_n_steps=1, skip_nonfinite=True),
    "global_norm": dict(
        every_n_steps=2,
        clipping={"method": "global_norm", "max_norm": 1.0},
        skip_nonfinite=True,
    ),
    "autoclip": dict(
        every_n_steps=1, clipping={"method": "autoclip", "percentile": 50.0}
    ),
    "zclip": dict(every_n_steps=1, clipping={"method": "zclip", "warmup": 1}),
    "agc": dict(every_n_steps=1, clipping={"method": "agc", "clipping": 0.01}),
}
#: The runs without the scenario's gradient `GAP` (a variable without a
#: gradient at step 1, a step of another structure: a second compile, about
#: 5 s on each backend). The gap's rows are filled with the missing row by
#: the measurement and the clipping rule gets the present gradients' weights
#: by row, the same for every rule: "every_step" measures the gap with
#: histograms and groups, "agc" (the one rule that reads the weights)
#: clips around it. The other runs have every gradient at every step.
GAPS = ("every_step", "agc")
#: Integer-valued state: compared exactly.
EXACT = ("_steps", "_counts")  # the rings' counts and steps, the step counts


@pytest.fixture(scope="module")
def data():
    return scenario()


@pytest.fixture(scope="module")
def sides(data, tmp_path_factory) -> tuple[dict, dict]:
    """Every configuration's run on the TensorFlow backend, in one process
    of its own, and, while that runs, on JAX here: `(TensorFlow's, JAX's)`
    arrays, keyed `<configuration>/<key>`."""
    folder = tmp_path_factory.mktemp("parity")
    source, target = folder / "in.npz", folder / "out.npz"
    np.savez(source, configs=json.dumps(CONFIGS), gaps=json.dumps(GAPS), **data)
    tensorflow = start_python(
        ["-m", "tests.jax.monitor_side", str(source), str(target)], "tensorflow"
    )
    try:
        jax_side = run_all(data, CONFIGS, GAPS)
    finally:
        tensorflow.finish()
    return dict(np.load(target)), jax_side


def _config(arrays: dict, name: str) -> dict:
    prefix = f"{name}/"
    return {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_state_equals_tensorflow_backend(name, sides):
    tf_side, jax_side = (_config(arrays, name) for arrays in sides)
    state = sorted(k for k in tf_side if k.startswith("state_"))
    assert state == sorted(k for k in jax_side if k.startswith("state_"))
    for key in state:
        want, got = tf_side[key], jax_side[key]
        if key.endswith(EXACT):
            np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=key)
        elif key == "state_stats_values":
            _assert_rows_close(got, want, CONFIGS[name])
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=0, err_msg=key)
    for key in (k for k in tf_side if k.startswith("variable_")):
        _assert_variables_equal(jax_side[key], tf_side[key], CONFIGS[name], key)
    # The scenario's NaN step is recorded; a clipping rule clipped.
    values = jax_side["state_stats_values"]
    assert np.isfinite(values).any() and np.isnan(values).any()
    # The gap is recorded (a step-1 row) where the run had it, only there.
    missing = [_snapshot(row, CONFIGS[name]).totals["grad_missing"] for row in values]
    assert np.nansum(missing) == (name in GAPS)
    if "clipping" in CONFIGS[name]:
        scales = [_snapshot(row, CONFIGS[name]).totals["clip_scale"] for row in values]
        assert np.nanmin(scales) < 1.0


def _assert_variables_equal(got, want, config: dict, key: str) -> None:
    """Bit for bit without clipping: each update is one rounding of the
    same numbers (a power-of-two learning rate), the same on every backend.
    Clipped, within one rounding a step: the clipping scale comes from a
    float32 norm, a sum whose order is each backend's own (and each CPU's:
    the width of its vector units), so it may differ by an ulp, and the
    update with it: within an ulp of the weight and two of the update (at
    most 2**-10 * 40: the scenario's gradient elements are below 27, but for
    the 3e30 ones, which every rule clips) per step. A wrong scale would
    move the weights by the update's size, 1e-3 and more."""
    if "clipping" not in config:
        np.testing.assert_array_equal(got, want, err_msg=key)
    else:
        steps, eps = 4, float(np.finfo(np.float32).eps)
        atol = steps * 2 * eps * 2.0**-10 * 40
        np.testing.assert_allclose(got, want, rtol=steps * eps, atol=atol, err_msg=key)


def _snapshot(row: np.ndarray, config: dict) -> Snapshot:
    groups = config.get("groups", {})
    layout = Layout(num_variables=8, num_groups=len(groups), weights=True)
    return Snapshot.of_captured(0, row, [f"v{i}" for i in range(8)], groups, layout)


def _assert_rows_close(got: np.ndarray, want: np.ndarray, config: dict) -> None:
    """Every recorded number within 1e-5 relative, but a mean within 1e-5
    of its tensor's largest magnitude: a float32 sum that cancels (a mean
    near 0 of weights near 1) is as exact as its summation order, which
    differs between TensorFlow's and JAX's XLA."""
    mean = COLUMNS.index("mean")
    for step, (row, reference) in enumerate(zip(got, want)):
        ours, theirs = _snapshot(row, config), _snapshot(reference, config)
        for field in ("grad", "weight"):
            a, b = ours.field(field).copy(), theirs.field(field).copy()
            scale = b[:, COLUMNS.index("max_abs")]
            np.testing.assert_allclose(
                a[:, mean], b[:, mean], rtol=0, atol=1e-5 * np.nanmax(scale)
            )
            a[:, mean], b[:, mean] = 0.0, 0.0
            np.testing.assert_allclose(a, b, rtol=1e-5, err_msg=f"{field} {step}")
        for field in ("totals", "groups", "ratio"):
            np.testing.assert_allclose(
                ours.field(field), theirs.field(field), rtol=1e-5, err_msg=field
            )
