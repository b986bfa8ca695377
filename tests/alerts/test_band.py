import math

import pytest

from keras_gradmon.alerts import AlertEngine, BandRule, default_activation_rules


def test_band_rule_fires_once_per_excursion_after_patience():
    rule = BandRule(low=0.5, high=2.0, patience=2)
    fired = {
        step: [(a.subject, a.comparison, a.threshold) for a in rule.update(step, v)]
        for step, v in enumerate(
            [
                {"h": 0.1, "g": 1.0},
                {"h": 0.2, "g": 3.0},
                {"h": 0.2, "g": 4.0},  # same runs: silent
                {"h": 1.0, "g": 1.0},  # back in band: re-armed
                {"h": 0.3, "g": math.nan},  # NaN neither extends nor ends
                {"h": 0.3, "g": 5.0},
                {"h": 0.3, "g": 5.0},
            ]
        )
    }
    assert fired == {
        0: [],
        1: [("h", "<", 0.5)],
        2: [("g", ">", 2.0)],
        3: [],
        4: [],
        5: [("h", "<", 0.5)],
        6: [("g", ">", 2.0)],
    }


def test_band_rule_message_names_layer_value_and_band():
    (alert,) = BandRule(patience=1).update(100, {"hidden_1": 0.05})
    assert alert.message.startswith(
        "WARNING activation_std out of band at step 100: activation_std of "
        "'hidden_1' = 0.05 < 0.5 (healthy band 0.5 to 2)."
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"low": 0.0}, "`low` must be a positive finite number. Received: low=0.0"),
        ({"low": 2.0, "high": 1.0}, "`low` must be smaller than `high`"),
        ({"patience": 0}, "Received: patience=0"),
    ],
)
def test_band_rule_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        BandRule(**kwargs)


def test_default_activation_rules_read_std_and_dead_fraction():
    engine = AlertEngine(
        default_activation_rules(std_band=(0.5, 2.0), dead_fraction=0.25)
    )
    for step in range(3):
        alerts = engine.update(
            step,
            {
                "activation_std": {"h1": 0.1, "h2": 1.0},
                "activation_dead_fraction": {"h1": 0.5, "h2": 0.0},
            },
        )
    # The band rule needs 3 summaries; the dead-unit threshold fires each
    # time; the rules of the layers' own levels see nothing fall.
    assert [(a.rule, a.subject) for a in alerts] == [
        ("band", "h1"),
        ("threshold", "h1"),
    ]
    assert alerts[1].metric == "activation_dead_fraction"
    assert "LeakyReLU" in alerts[1].hint


def test_default_activation_rules_switch_off_and_validate():
    # The fixed levels are opt-in; the own-level rules are always there.
    assert sorted(default_activation_rules()) == [
        "activation_collapse",
        "activation_nonfinite",
        "dead_units",
    ]
    with pytest.raises(ValueError, match=r"Received: std_band=0\.5"):
        default_activation_rules(std_band=0.5)
    with pytest.raises(ValueError, match=r"Received: dead_fraction=1\.5"):
        default_activation_rules(dead_fraction=1.5)
