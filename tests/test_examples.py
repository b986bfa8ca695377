import importlib.util
import pathlib

import numpy as np

from tests.reference import load_events, scalar_series

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_custom_loop_example_writes_what_it_recorded(tmp_path):
    totals = _load("custom_loop").main(steps=40, log_dir=str(tmp_path))
    events = load_events(str(tmp_path))
    series = scalar_series(events, "grad_norm/global")
    assert sorted(series) == [0, 10, 20, 30]
    np.testing.assert_allclose(series[30], totals["grad_norm"], rtol=1e-6)
    assert "clip/pre_norm" in events.Tags()["tensors"]
    assert "alerts/nonfinite" in events.Tags()["tensors"]
