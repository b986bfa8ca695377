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
    criteria = HealthCriteria()
    assert defaults.STD_BAND == (0.05, 20.0)
    assert defaults.DEAD_FRACTION == 0.25
    assert {tuple(args.std_band), criteria.std_band} == {defaults.STD_BAND}
    assert {args.dead_fraction, criteria.dead_fraction} == {defaults.DEAD_FRACTION}


def test_the_fixed_activation_levels_are_opt_in_for_alerts():
    # Real architectures sit far outside any fixed level in inference mode
    # (docs/activations.md): the alerts judge each layer by its own level.
    options = ActivationOptions(data=[[0.0]])
    assert (options.std_band, options.dead_fraction) == (None, None)
    assert sorted(options.default_rules()) == [
        "activation_collapse",
        "activation_nonfinite",
        "dead_units",
    ]
    rules = default_activation_rules(defaults.STD_BAND, defaults.DEAD_FRACTION)
    band = rules["activation_std"]
    assert (band.low, band.high) == defaults.STD_BAND
    assert rules["dead_fraction"].warning == defaults.DEAD_FRACTION


def test_defaults_and_formatting_import_neither_tensorflow_nor_keras():
    code = (
        "import sys, keras_gradmon.defaults, keras_gradmon.formatting;"
        "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
