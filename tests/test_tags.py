"""The one tag table: built at `build()`, indexing the flat state vector;
and the parser the report reads tags back with."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_gradmon import GradientMonitorOptimizer
from keras_gradmon.columns import (
    COLUMNS,
    monitor_scopes,
    parse,
    tag,
    variable_statistic,
)


def _trained(**options) -> GradientMonitorOptimizer:
    a = keras.Variable(np.array([3.0, -4.0], "float32"), name="a")
    b = keras.Variable(np.zeros([2, 2], "float32"), name="b")  # weight norm 0
    c = keras.Variable(np.ones([3], "float32"), name="c")  # no gradient
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.0), every_n_steps=1, groups={"ab": "^[ab]$"}, **options
    )
    optimizer.apply([tf.constant([0.3, 0.4]), tf.ones([2, 2]), None], [a, b, c])
    return optimizer


def test_every_value_comes_from_its_field():
    optimizer = _trained(clipping={"method": "global_norm", "max_norm": 1.0})
    snapshot = optimizer.snapshot()
    tags = optimizer.monitor.tags
    values = tags.scalar_values(snapshot.values, snapshot.has_grad)
    assert not [t for t in values if t.endswith(("/a", "/b", "/c"))]
    values |= tags.table.table(snapshot.values).scalars()
    grad, weight = snapshot.grad, snapshot.weight
    norm = COLUMNS.index("norm")
    assert values["grad_norm/global"] == pytest.approx(np.sqrt(0.25 + 4.0))
    assert values["grad_norm/ab"] == values["grad_norm/global"]
    assert values["grad_std/a"] == grad[0, COLUMNS.index("std")]
    assert values["weight_max/c"] == weight[2, COLUMNS.index("max")] == 1.0
    assert values["grad_to_weight/a"] == pytest.approx(grad[0, norm] / 5.0)
    assert values["clip/scale"] == pytest.approx(1.0 / values["clip/pre_norm"])
    assert values["grad_missing/global"] == 1.0
    # No gradient: no grad_* tag; a zero weight norm: no ratio.
    assert not any(t.startswith("grad_") and t.endswith("/c") for t in values)
    assert "grad_to_weight/b" not in values
    assert "skipped/steps" not in values and "loss_scale/scale" not in values


def test_scoped_and_reduced_tables():
    optimizer = _trained(
        name="critic",
        statistics=("norm",),
        weight_statistics=False,
        update_statistics=False,
        per_variable=True,
    )
    snapshot = optimizer.snapshot()
    tags = optimizer.monitor.tags
    assert sorted(tags.scalar_values(snapshot.values, snapshot.has_grad)) == [
        "grad_missing/critic/global",
        "grad_nonfinite/critic/global",
        "grad_norm/critic/ab",
        "grad_norm/critic/global",
    ]
    table = tags.table.table(snapshot.values)
    assert table.tag == "keras_gradmon/critic/variables"
    assert table.rows == ("a", "b", "c")
    assert table.columns == ("grad_present", "grad_norm")
    # c had no gradient: its row says so, its norm is NaN.
    np.testing.assert_allclose(table.values, [[1, 0.5], [1, 2], [0, np.nan]])
    assert sorted(table.scalars()) == ["grad_norm/critic/a", "grad_norm/critic/b"]


def test_per_variable_scalars_are_the_table_written_tag_by_tag():
    """`per_variable_scalars=True` writes exactly the tags and values that
    the table stands for, and no table."""
    options = {"clipping": {"method": "global_norm", "max_norm": 1.0}}
    tabled = _trained(**options)
    listed = _trained(per_variable_scalars=True, **options)
    assert listed.monitor.tags.table is None
    one, two = tabled.snapshot(), listed.snapshot()
    np.testing.assert_array_equal(one.values, two.values)
    tags = tabled.monitor.tags
    expected = tags.scalar_values(one.values, one.has_grad)
    expected |= tags.table.table(one.values).scalars()
    assert listed.monitor.tags.scalar_values(two.values, two.has_grad) == expected
    assert len(expected) == 54  # a: 18, b: 16 (no ratios: weight norm 0), c: 8


def test_parse_reads_what_tag_writes():
    for statistic, subject, scope in [
        ("grad_norm", "global", None),
        ("grad_std", "model/dense/kernel", "actor"),
        ("clip", "pre_norm", "critic"),
    ]:
        name = tag(statistic, subject, scope)
        parsed = parse(name, {"actor", "critic"})
        assert (parsed.statistic, parsed.scope, parsed.subject) == (
            statistic,
            scope,
            subject,
        )
    tags = ["grad_norm/global", "grad_norm/actor/global", "grad_norm/actor/dense"]
    assert monitor_scopes(tags) == {None, "actor"}
    assert variable_statistic("weight_zero_fraction")
    assert not variable_statistic("grad_nonfinite")
    assert not variable_statistic("clip")
