"""The schema of what a monitor records needs no framework: config, tags,
the layout and the report load and work without TensorFlow or keras; the
statistics it names are the registered ones."""

import subprocess
import sys
import textwrap

import numpy as np

from keras_gradmon import columns as schema
from keras_gradmon.columns import COLUMNS
from keras_gradmon.core import statistics
from keras_gradmon.core.batched import batched_statistics
from keras_gradmon.core.state import Layout
from tests.reference import reference_statistics


def test_config_tags_layout_and_report_need_no_framework():
    script = textwrap.dedent(
        """
        import sys
        from keras_gradmon.core.config import MonitorConfig
        from keras_gradmon.columns import Layout
        from keras_gradmon.columns import TagTable, parse

        config = MonitorConfig(every_n_steps=5, groups={"head": "head"})
        layout = Layout(num_variables=2, num_groups=1, weights=True)
        table = TagTable.build(config, ["body/kernel", "head/kernel"], ["head"], layout)
        assert parse("grad_norm/head/kernel").statistic == "grad_norm"
        assert len(table.scalars) > 10
        import keras_gradmon.cli
        import keras_gradmon.report.analysis

        sys.exit(3 if {"tensorflow", "keras"} & set(sys.modules) else 0)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert result.returncode == 0, result.stderr.decode()[-2000:]


def test_the_state_speaks_the_schema():
    assert (*schema.STATISTICS, "present") == COLUMNS
    assert Layout is schema.Layout


def test_every_statistic_of_the_schema_is_computed():
    values = np.random.default_rng(0).normal(size=(5, 7)).astype("float32")
    [row] = batched_statistics([values]).numpy()
    reference = reference_statistics(values)
    for column, name in enumerate(schema.STATISTICS):
        np.testing.assert_allclose(row[column], reference[name], rtol=1e-5, atol=1e-7)


def test_each_statistic_of_the_schema_is_one_registered_definition():
    # keras_gradmon/core/statistics.py defines the statistic <name> once
    # (`BUILT_IN`); the schema names them (and their order) without keras.
    assert tuple(statistics.BUILT_IN) == schema.STATISTICS
    assert all(statistics.BUILT_IN[n].name == n for n in schema.STATISTICS)
    assert statistics.registered() == schema.STATISTICS
