"""One options style: every monitor's options from an options object, a dict
or a config file's section (`config=`), `alerts=` and keyword options, in
that order of precedence; a config file holds every section, and its errors
name it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from keras_gradmon import AlertOptions, MonitorConfig
from keras_gradmon.activations.monitor import ActivationOptions
from keras_gradmon.rl.monitor import RLOptions

PROBE = np.zeros((4, 3), "float32")


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "train.json"
    path.write_text(
        json.dumps(
            {
                "monitor": {"every_n_steps": 7},
                "alerts": {"fold_steps": 11, "cooldown_steps": 3},
                "activations": {"every_n_steps": 5, "fold_steps": 13},
                "rl": {"window": 20},
            }
        )
    )
    return str(path)


def test_each_options_object_reads_its_section_over_the_alerts_one(config_file):
    assert MonitorConfig.resolve(config_file, {}).every_n_steps == 7
    assert AlertOptions.build(config_file).fold_steps == 11
    activations = ActivationOptions.build(config_file, data=PROBE)
    assert (activations.every_n_steps, activations.fold_steps) == (5, 13)
    assert activations.cooldown_steps == 3  # from the alerts section
    rl = RLOptions.build(config_file)
    assert (rl.window, rl.fold_steps, rl.cooldown_steps) == (20, 11, 3)


def test_alerts_come_over_the_config_and_options_over_both(config_file):
    alerts = AlertOptions(fold_steps=None)
    built = ActivationOptions.build(config_file, alerts, data=PROBE, every_n_steps=2)
    assert (built.fold_steps, built.every_n_steps) == (None, 2)
    assert built.cooldown_steps == 0  # alerts= replaces every alert field
    with pytest.raises(ValueError, match=r"both in `alerts` and one by one"):
        ActivationOptions.build(None, alerts, "m", data=PROBE, fold_steps=4)


def test_a_bad_option_in_a_section_names_the_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"activations": {"every_n_steps": 0}}))
    with pytest.raises(ValueError, match=r"every_n_steps.*\(in '.*bad\.json'\)"):
        ActivationOptions.build(str(path), data=PROBE)


def test_the_0_2_spelling_of_activation_options_warns_and_works():
    with pytest.warns(DeprecationWarning, match=r"ActivationOptions\.build"):
        options = ActivationOptions.of(PROBE, {"every_n_steps": 10}, "m")
    assert options.every_n_steps == 10 and options.data is PROBE


def test_a_file_without_sections_holds_the_monitor_options(tmp_path):
    path = tmp_path / "flat.json"
    path.write_text(json.dumps({"every_n_steps": 3}))
    assert MonitorConfig.resolve(str(path), {"histogram_every_n_steps": None}) == (
        MonitorConfig(every_n_steps=3, histogram_every_n_steps=None)
    )
    assert AlertOptions.build(str(path)) == AlertOptions()
