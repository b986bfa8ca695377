"""The gradient noise scale estimator under `jax.jit`: the checks the
TensorFlow process runs in tests/signals/test_noise_scale.py, and no
TensorFlow import on its path."""

from __future__ import annotations

import jax
import pytest

from tests.jax.processes import run_python
from tests.signals import noise_checks


def test_estimates_match_reference():
    noise_checks.check_estimates(jax.jit)


@pytest.mark.parametrize("batch_size", [None, 8])
def test_update_and_totals_match_reference(batch_size):
    noise_checks.check_update_and_totals(jax.jit, batch_size)


def test_smoothed_ratio_positive_when_single_estimates_are_negative():
    noise_checks.check_negative_estimates(jax.jit)


@pytest.mark.parametrize("case", noise_checks.REGRESSIONS)
def test_regression_b_simple_within_15_percent(case):
    noise_checks.check_regression(jax.jit, case)


_BLOCKED_RUN = """
import importlib.abc, sys
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ImportError("tensorflow is blocked")
sys.meta_path.insert(0, Blocker())
import jax
from keras_gradmon.core.noise_scale import from_option
rule = from_option({"batch_size": 8})
state = jax.jit(rule.update)(rule.initial_state(), 3.0, 1.5, 4)
print(float(jax.jit(rule.totals)(state)["b_simple"]), "tensorflow" in sys.modules)
"""


def test_runs_without_tensorflow():
    out = run_python(["-c", _BLOCKED_RUN], "jax")
    assert out.split()[-2:] == ["16.0", "False"]
