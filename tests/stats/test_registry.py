"""Statistics as registered objects: a statistic written in one module (here
two test-only ones, `toy_rms` and `toy_mean_abs`), once registered, is
computed by `batched_statistics` with the others, in the same program, and
checked against its own NumPy reference."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from keras_gradmon.columns import STATISTICS
from keras_gradmon.core import statistics as registry
from keras_gradmon.core.batched import batched_statistics, tensor_statistics
from keras_gradmon.core.statistics import Statistic
from tests.conftest import compile_fn
from tests.reference import (
    assert_rows_close,
    flush_subnormals,
    hard_cases,
    reference_statistics,
)
from tests.stats import toy_rms
from tests.stats.toys import NAMES, assert_toy_rows, registered


@pytest.fixture
def toys():
    with registered():
        yield
    assert registry.registered() == STATISTICS


def _held() -> list[np.ndarray]:
    rng = np.random.default_rng(4)
    sizes = rng.integers(0, 300, size=20)
    scales = 10.0 ** rng.integers(-30, 31, size=20)
    random = (rng.normal(size=n) * k for n, k in zip(sizes, scales))
    return [*hard_cases(), *(flush_subnormals(v) for v in random)]


def test_a_statistic_in_one_module_joins_the_batched_program(toys, mode):
    held = _held()
    tensors = [tf.constant(v) for v in held]
    rows = compile_fn(lambda ts: batched_statistics(ts, NAMES), mode)(tensors)
    assert_toy_rows(rows, compile_fn(batched_statistics, mode)(tensors), held)


def test_asked_alone_a_registered_statistic_has_a_column_after_the_schema(toys):
    values = np.array([3e30, -4e30, np.nan, 0.0], "f4")
    rows = batched_statistics([tf.constant(values)], ["mean_abs", "rms"])
    assert registry.columns(["mean_abs", "rms"]) == (*STATISTICS, "mean_abs", "rms")
    assert_rows_close(rows, [values], ["mean_abs", "rms"])
    out = tensor_statistics(tf.constant(values), ["rms"])
    want = reference_statistics(values, ["rms"])["rms"]
    np.testing.assert_allclose(out["rms"].numpy(), want, rtol=1e-6)


def test_unregistered_statistics_are_unknown(toys):
    registry.unregister("rms")
    with pytest.raises(ValueError, match="Unknown statistic 'rms'"):
        batched_statistics([tf.ones([2])], ["rms"])
    registry.register(toy_rms.STATISTIC)


def _bad_statistic():
    return Statistic("x", needs={"cube"}, fast=abs, reference=abs)


def _careless_statistic():
    return Statistic("x", needs=(), fast=abs, reference=abs, untrusted=abs)


def _second_norm():
    return registry.register(dataclasses.replace(toy_rms.STATISTIC, name="norm"))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_bad_statistic, "unknown reduction 'cube'"),
        (_careless_statistic, "no `careful` path"),
        (_second_norm, "'norm' is already registered"),
        (lambda: registry.unregister("norm"), "'norm' is in STATISTICS"),
        (lambda: registry.unregister("median"), "Unknown statistic 'median'"),
    ],
)
def test_invalid_registrations(make, message):
    with pytest.raises(ValueError, match=message):
        make()
    assert registry.registered() == STATISTICS
