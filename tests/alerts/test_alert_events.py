"""Tests of the `Alert` record: log line, JSON form, validation."""

from __future__ import annotations

import json
import math

import pytest

from keras_gradmon.alerts import (
    CRITICAL,
    EXPLOSION_HINT,
    WARNING,
    Alert,
    format_number,
)
from tests.doctests import assert_examples_hold

SPEC_EXAMPLE = (
    "CRITICAL gradient threshold at step 300: grad_norm of 'actor_cnn' = "
    "826,256 > 50,000. Hint: lower the learning rate or enable global-norm "
    "clipping (clipping: {method: global_norm}) in the config."
)



def test_message_matches_the_documented_example():
    alert = Alert(
        "threshold", CRITICAL, 300, 826_256.0, 50_000.0, "actor_cnn", EXPLOSION_HINT
    )
    assert alert.message == SPEC_EXAMPLE


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (826_256.0, "826,256"),
        (50_000, "50,000"),
        (5_191.4, "5,191"),
        (-1_234.0, "-1,234"),
        (0.5, "0.5"),
        (3.0, "3"),
        (0.0, "0"),
        (1.23456e-5, "1.235e-05"),
        (2.5e12, "2.5e+12"),
        (math.nan, "nan"),
        (math.inf, "inf"),
    ],
)
def test_format_number(x, expected):
    assert format_number(x) == expected


def test_message_parts_come_from_the_fields():
    alert = Alert(
        "spike",
        WARNING,
        7,
        2.5,
        1.25,
        "dense/kernel",
        "do something!",
        metric="weight_norm",
        comparison=">=",
        context=" (z = 9 > 6)",
        note="last spike warning",
    )
    assert alert.title == "weight_norm spike"
    assert alert.message == (
        "WARNING weight_norm spike at step 7: weight_norm of 'dense/kernel' = "
        "2.5 >= 1.25 (z = 9 > 6). Hint: do something! [last spike warning]"
    )


def test_message_without_hint_and_custom_rule_title():
    alert = Alert("plateau", WARNING, 1, 1.0, 2.0, "global", comparison="<")
    assert alert.message == (
        "WARNING gradient plateau at step 1: grad_norm of 'global' = 1 < 2."
    )


def test_message_lists_subjects_from_details():
    names = [f"layer_{i}/kernel" for i in range(7)]
    counts = {name: float(10 - i) for i, name in enumerate(names)}
    alert = Alert(
        "nonfinite",
        CRITICAL,
        9,
        sum(counts.values()),
        0.0,
        names[0],
        "look",
        details={"subjects": names, "counts": counts},
        metric="grad_nonfinite",
    )
    assert alert.message == (
        "CRITICAL non-finite gradient at step 9: grad_nonfinite = 49 > 0 in "
        "7 subjects: 'layer_0/kernel' (10), 'layer_1/kernel' (9), "
        "'layer_2/kernel' (8), 'layer_3/kernel' (7), 'layer_4/kernel' (6) "
        "and 2 more. Hint: look."
    )


def test_to_dict_is_strict_json_and_keeps_every_field():
    alert = Alert(
        "spike",
        WARNING,
        12,
        math.nan,
        math.inf,
        "global",
        "hint",
        details={"z": -math.inf, "nested": {"xs": (1.0, math.nan)}, "obj": object},
    )
    data = json.loads(json.dumps(alert.to_dict(), allow_nan=False))
    assert data == {
        "rule": "spike",
        "tier": "warning",
        "step": 12,
        "value": "nan",
        "threshold": "inf",
        "subject": "global",
        "metric": "grad_norm",
        "comparison": ">",
        "hint": "hint",
        "details": {
            "z": "-inf",
            "nested": {"xs": [1.0, "nan"]},
            "obj": "<class 'object'>",
        },
        "note": "",
        "message": alert.message,
    }


def test_from_dict_reads_back_what_to_dict_wrote():
    alert = Alert(
        "vanishing", CRITICAL, 40, 1e-9, math.inf, "dense/kernel", "hint",
        details={"streak": 3}, metric="grad_norm", comparison="<", note="n",
    )  # fmt: skip
    data = json.loads(json.dumps(alert.to_dict(), allow_nan=False))
    assert Alert.from_dict(data) == alert
    assert Alert.from_dict({**data, "scope": "actor"}) == alert  # unknown key
    nan = Alert.from_dict({**data, "value": "nan"}).value
    assert math.isnan(nan)
    for broken in ({**data, "tier": "fatal"}, {**data, "step": "x"}):
        with pytest.raises(ValueError):
            Alert.from_dict(broken)
    with pytest.raises(KeyError):
        Alert.from_dict({k: v for k, v in data.items() if k != "rule"})


def test_details_are_copied_and_alerts_hashable():
    details = {"z": 1.0}
    alert = Alert("spike", WARNING, 1, 2.0, 1.0, "global", details=details)
    details["z"] = 99.0
    assert alert.details == {"z": 1.0}
    assert alert in {alert}
    assert alert == Alert("spike", WARNING, 1, 2.0, 1.0, "global", details={"z": 1.0})


def test_invalid_tier_is_rejected():
    with pytest.raises(
        ValueError,
        match=r"^`tier` must be one of \('warning', 'critical'\)\. "
        r"Received: tier='fatal'$",
    ):
        Alert("spike", "fatal", 1, 2.0, 1.0, "global")


@pytest.mark.parametrize(
    "module",
    [
        "keras_gradmon.alerts",
        "keras_gradmon.alerts.base",
        "keras_gradmon.alerts.defaults",
        "keras_gradmon.alerts.delivery",
        "keras_gradmon.alerts.engine",
        "keras_gradmon.alerts.events",
        "keras_gradmon.alerts.incidents",
        "keras_gradmon.alerts.rules",
        "keras_gradmon.alerts.scale",
    ],
)
def test_docstring_examples_hold(module):
    assert_examples_hold(module)
