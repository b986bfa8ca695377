"""The schema of what a monitor records is TensorFlow-free: config, tags
and the layout load and work without it (the first step towards backends
without TensorFlow)."""

import subprocess
import sys
import textwrap

import numpy as np

from keras_gradmon import schema
from keras_gradmon.state import COLUMNS, Layout
from keras_gradmon.stats import batched_statistics
from tests.reference import reference_statistics


def test_config_tags_and_layout_need_no_tensorflow():
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
        sys.exit(3 if "tensorflow" in sys.modules else 0)
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
