"""`Schedule`: one answer to "is step N due", in the graph and on the host."""

from __future__ import annotations

import pytest
import tensorflow as tf

from keras_gradmon.schedule import Schedule
from tests.conftest import compile_fn


@pytest.mark.parametrize(
    "frequency", [1, 7, lambda step: tf.equal(step % 5, 2), lambda step: step > 3]
)
def test_graph_and_host_agree(frequency, mode):
    schedule = Schedule(frequency)
    graph = compile_fn(lambda step: schedule.due(step), mode)
    for step in range(12):
        host = schedule.due(step)
        assert isinstance(host, bool)
        assert bool(graph(tf.constant(step, tf.int64))) == host
        assert bool(graph(tf.constant(step, tf.int32))) == host


@pytest.mark.parametrize("frequency", [1, 3, 10, lambda step: tf.equal(step % 4, 1)])
def test_any_due_is_the_union_of_due(frequency):
    schedule = Schedule(frequency)
    for first in range(0, 15):
        for end in range(first, 20):
            expected = any(schedule.due(s) for s in range(first, end))
            assert schedule.any_due(first, end) == expected, (first, end)


def test_none_is_never_due():
    schedule = Schedule(None)
    assert schedule.never and not schedule.due(0) and not schedule.any_due(0, 100)
    assert not bool(schedule.due(tf.constant(0, tf.int64)))


def test_long_callable_ranges_answer_without_evaluating():
    calls = []

    def frequency(step):
        calls.append(1)
        return tf.equal(step % 1000, 0)

    schedule = Schedule(frequency)
    calls.clear()
    assert schedule.any_due(1, 100_000)  # "may be due": not evaluated 10**5 times
    assert not calls
