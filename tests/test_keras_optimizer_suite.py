"""Keras's own optimizer tests (`keras/src/optimizers/*_test.py`), run with
every optimizer they build wrapped in `GradientMonitorOptimizer`.

The wrapper is meant as a drop-in: a test that passes for the plain
optimizer passes wrapped, except for the few listed in `DIFFERENCES`, each
with the reason (they inspect the wrapper's structure, not its behaviour).
"""

from __future__ import annotations

import importlib
import inspect
import types
import unittest

import pytest

import keras_gradmon

# Module: the optimizer class its tests build.
MODULES = {
    "adam": "Adam",
    "adamw": "AdamW",
    "sgd": "SGD",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
    "adadelta": "Adadelta",
    "adamax": "Adamax",
    "nadam": "Nadam",
    "ftrl": "Ftrl",
    "lion": "Lion",
    "lamb": "Lamb",
    "adafactor": "Adafactor",
    "optimizer": None,  # the base class's tests, through `optimizers.*`
}

#: Tests whose premise a wrapper cannot meet, by design.
DIFFERENCES = {
    "adam.test_ema": "reads the private `_model_variables_moving_average` "
    "of the optimizer (the EMA is the inner optimizer's)",
    "adam.test_ema_overwrite_frequency": "the same private attribute",
    "nadam.test_build_with_empty_var_list": "reads the private `_u_product`",
    "sgd.test_single_step": "counts `optimizer.variables`: the wrapper adds "
    "the monitor's state",
    "optimizer.test_ema": "reads the private `_model_variables_moving_average`",
    "optimizer.test_ema_with_model_fit": "the same private attribute (the "
    "behaviour is tested in test_keras_dropin.py)",
    "optimizer.test_gradient_accumulation": "reads the private "
    "`_accumulated_gradients` and `_iterations` (the inner optimizer's)",
    "optimizer.test_overwrite_with_gradient_with_gradient_accumulation": "reads "
    "the private `_iterations`",
    "optimizer.test_get_method": "compares `optimizers.get` results by class",
    "optimizer.test_optimizer_auto_naming": "checks auto-generated names "
    "against the optimizer class name",
}


#: Statistics every other step, histograms every fourth: a test of several
#: steps runs steps that measure everything, steps that measure the
#: statistics only, and steps that measure nothing (each an eager apply of
#: its own: every step measuring made this file about twice as long).
EVERY = {"every_n_steps": 2, "histogram_every_n_steps": 4}


def _wrapping(cls: type):
    def build(*args, **kwargs):
        return keras_gradmon.GradientMonitorOptimizer(cls(*args, **kwargs), **EVERY)

    return build


def _wrapped_namespace(optimizers: types.ModuleType) -> types.SimpleNamespace:
    """`keras.src.optimizers` with every optimizer class wrapping."""
    names = {n: getattr(optimizers, n) for n in dir(optimizers)}
    for name, value in list(names.items()):
        if inspect.isclass(value) and name not in ("Optimizer", "LossScaleOptimizer"):
            names[name] = _wrapping(value)

    def get(identifier, **kwargs):
        optimizer = optimizers.get(identifier, **kwargs)
        if optimizer is None:
            return None
        return keras_gradmon.GradientMonitorOptimizer(optimizer, **EVERY)

    names["get"] = get
    return types.SimpleNamespace(**names)


def _cases() -> list[tuple[str, str]]:
    cases = []
    for module in MODULES:
        tests = importlib.import_module(f"keras.src.optimizers.{module}_test")
        for obj in vars(tests).values():
            if inspect.isclass(obj) and issubclass(obj, unittest.TestCase):
                for name in unittest.defaultTestLoader.getTestCaseNames(obj):
                    cases.append((module, f"{obj.__name__}.{name}"))
    return cases


@pytest.mark.parametrize(("module", "test"), _cases())
def test_keras_optimizer_test_passes_wrapped(module, test, monkeypatch):
    tests = importlib.import_module(f"keras.src.optimizers.{module}_test")
    if MODULES[module] is None:
        monkeypatch.setattr(tests, "optimizers", _wrapped_namespace(tests.optimizers))
    else:
        monkeypatch.setattr(
            tests, MODULES[module], _wrapping(getattr(tests, MODULES[module]))
        )
    case_name, method = test.split(".")
    case = getattr(tests, case_name)(method)
    result = unittest.TestResult()
    case.run(result)
    problems = result.failures + result.errors
    # Parameterized tests carry an index: `test_x0`, `test_x1`, ...
    reason = DIFFERENCES.get(f"{module}.{method.rstrip('0123456789')}")
    if reason is None:
        assert not problems, problems[0][1]
    else:  # strict: a listed difference that no longer differs is an error
        assert problems, f"{module}.{method} passes wrapped now: unlist it"
        pytest.xfail(reason)
