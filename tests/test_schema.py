"""The schema of what a monitor records needs no framework: config, tags,
the layout and the report load and work without TensorFlow or keras; the
statistics it names are the registered ones."""

import pkgutil
import subprocess
import sys
import textwrap

import numpy as np

from keras_gradmon import schema
from keras_gradmon.state import COLUMNS, Layout
from keras_gradmon.stats import batched_statistics, registry, statistics
from tests.reference import reference_statistics


def test_config_tags_layout_and_report_need_no_framework():
    script = textwrap.dedent(
        """
        import sys
        from keras_gradmon.config import MonitorConfig
        from keras_gradmon.schema import Layout
        from keras_gradmon.tags import TagTable, parse

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


def test_each_statistic_of_the_schema_is_one_registered_module():
    # keras_gradmon/stats/statistics/<name>.py defines the statistic <name>;
    # the schema names them (and their order) without importing keras.
    modules = [m.name for m in pkgutil.iter_modules(statistics.__path__)]
    assert sorted(modules) == sorted(schema.STATISTICS)
    assert registry.registered() == schema.STATISTICS
