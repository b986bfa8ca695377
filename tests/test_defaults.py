"""The option defaults live in `keras_gradmon.defaults` and every user of
them (command line, report, activation options and rules) reads them there."""

import subprocess
import sys

from keras_gradmon import cli, defaults
from keras_gradmon.activations.monitor import ActivationOptions
from keras_gradmon.alerts import default_activation_rules
from keras_gradmon.report.analysis import HealthCriteria


def test_every_user_reads_the_one_default():
    args = cli._parser().parse_args(["report", "logs"])
    options = ActivationOptions(data=[[0.0]])
    rules = default_activation_rules()
    criteria = HealthCriteria()
    assert defaults.STD_BAND == (0.05, 20.0)
    assert defaults.DEAD_FRACTION == 0.25
    bands = {
        tuple(args.std_band),
        options.std_band,
        criteria.std_band,
        (rules["activation_std"].low, rules["activation_std"].high),
    }
    assert bands == {defaults.STD_BAND}
    fractions = {
        args.dead_fraction,
        options.dead_fraction,
        criteria.dead_fraction,
        rules["dead_units"].warning,
    }
    assert fractions == {defaults.DEAD_FRACTION}


def test_defaults_and_formatting_import_neither_tensorflow_nor_keras():
    code = (
        "import sys, keras_gradmon.defaults, keras_gradmon.formatting;"
        "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
