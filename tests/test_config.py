import pytest

from keras_gradmon import STATISTICS, MonitorConfig


def test_defaults_and_round_trip():
    config = MonitorConfig()
    assert config.every_n_steps == 100
    assert config.statistics == STATISTICS
    assert MonitorConfig.from_dict(config.to_dict()) == config
    changed = config.replace(every_n_steps=5, groups={"head": "head"})
    assert changed.every_n_steps == 5 and changed.groups == {"head": "head"}
    assert config.every_n_steps == 100  # frozen original unchanged


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"every_n_steps": 0},
            r"`every_n_steps` must be a positive integer .* or a "
            r"callable .* Received: every_n_steps=0",
        ),
        ({"every_n_steps": -3}, r"Received: every_n_steps=-3"),
        ({"every_n_steps": 2.5}, r"Received: every_n_steps=2.5"),
        ({"every_n_steps": True}, r"Received: every_n_steps=True"),
        ({"histogram_every_n_steps": 0}, r"Received: histogram_every_n_steps=0"),
        (
            {"histogram_buckets": 0},
            r"`histogram_buckets` must be a positive integer. "
            r"Received: histogram_buckets=0",
        ),
        (
            {"statistics": ["norm", "median"]},
            r"unknown statistic 'median'.*"
            r"Received: statistics=\['norm', 'median'\]",
        ),
        ({"statistics": "norm"}, r"`statistics` must be a list"),
        (
            {"weight_statistics": 1},
            r"`weight_statistics` must be a bool. "
            r"Received: weight_statistics=1",
        ),
        (
            {"groups": {"head": "dense_(["}},
            r"`groups\['head'\]` is not a valid "
            r"regular expression .* Received: groups\['head'\]='dense_\(\['",
        ),
        ({"groups": {"global": "x"}}, r"other than 'global'"),
        ({"groups": {"a/b": "x"}}, r"Received: groups="),
        ({"groups": {"head": 3}}, r"`groups\['head'\]` must be a regular expression"),
        ({"groups": ["head"]}, r"`groups` must be a mapping"),
        (
            {"tag_scope": "a b"},
            r"`tag_scope` must be None or .* Received: "
            r"tag_scope='a b'",
        ),
    ],
)
def test_invalid_values_are_rejected_with_the_value(options, message):
    with pytest.raises(ValueError, match=message):
        MonitorConfig(**options)


def test_unknown_keys_list_the_valid_ones():
    with pytest.raises(
        ValueError,
        match=r"Unknown monitor option\(s\) \['every_n'\]. "
        r"Valid options: \['every_n_steps'",
    ):
        MonitorConfig.from_dict({"every_n": 3})
    with pytest.raises(ValueError, match="Unknown monitor option"):
        MonitorConfig().replace(bucket=3)


def test_callable_frequency_is_accepted():
    config = MonitorConfig(every_n_steps=lambda step: step % 7 == 0)
    assert callable(config.every_n_steps)


def test_presets():
    economy = MonitorConfig.preset("economy", every_n_steps=1)
    assert economy.statistics == ("norm", "nonfinite")
    assert economy.weight_statistics is False
    assert economy.histogram_every_n_steps is None
    assert economy.every_n_steps == 1
    assert MonitorConfig.preset("full") == MonitorConfig()
    with pytest.raises(
        ValueError,
        match=r"Unknown preset 'cheap'. Valid presets: "
        r"\['economy', 'full'\]",
    ):
        MonitorConfig.preset("cheap")
