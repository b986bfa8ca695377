"""Several unnamed monitored optimizers at one destination: the first keeps
unscoped tags, each other one gets a tag scope derived from the variables it
trains (stable from run to run), written once to the log and announced once
on the console; only a true tie (the same derived scope) is refused."""

from __future__ import annotations

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.util import tensor_util

import keras_gradmon
from keras_gradmon import GradientMonitorOptimizer, GradientSummaryCallback
from keras_gradmon.naming import derived_scope
from tests.helpers import LOSS, data
from tests.reference import load_events, scalar_series


def _model(name: str, features: int = 4) -> keras.Model:
    # Default layer names: dense_<uid>, another every construction.
    return keras.Sequential(
        [keras.Input((features,)), keras.layers.Dense(3), keras.layers.Dense(1)],
        name=name,
    )


def _step(optimizer, model: keras.Model, value: float) -> list[np.ndarray]:
    grads = [np.full(v.shape, value, "float32") for v in model.trainable_variables]
    optimizer.apply([tf.constant(g) for g in grads], model.trainable_variables)
    return grads


def _texts(events, prefix: str) -> dict[str, list[str]]:
    """`{tag: [text, ...]}` of the text summaries whose tag starts with `prefix`."""
    out = {}
    for name in events.Tags()["tensors"]:
        if not name.startswith(prefix):
            continue
        plugin = events.SummaryMetadata(name).plugin_data.plugin_name
        assert plugin == text_metadata.PLUGIN_NAME
        out[name] = [
            str(line.decode())
            for event in events.Tensors(name)
            for line in tensor_util.make_ndarray(event.tensor_proto).ravel()
        ]
    return out


def _gan(log_dir: str, alerts_dir=None, checkers=None) -> tuple:
    """A generator's and a discriminator's unnamed wrappers, two steps each,
    written to one writer with `write_summaries` (with an alert checker of
    the discriminator writing to `alerts_dir`, if given, into `checkers`)."""
    generator, discriminator = _model("generator"), _model("discriminator", 3)
    g_opt = keras_gradmon.wrap(keras.optimizers.SGD(0.0), every_n_steps=1)
    d_opt = keras_gradmon.wrap(keras.optimizers.SGD(0.0), every_n_steps=1)
    if alerts_dir is not None:
        checkers.append(keras_gradmon.AlertChecker(d_opt, log_dir=str(alerts_dir)))
    writer = tf.summary.create_file_writer(log_dir)
    norms: dict[str, list[float]] = {"g": [], "d": []}
    for step in range(2):
        for key, optimizer, model in (
            ("g", g_opt, generator),
            ("d", d_opt, discriminator),
        ):
            grads = _step(optimizer, model, 1.0 + step + (key == "d"))
            norms[key].append(float(np.sqrt(sum((g**2).sum() for g in grads))))
            keras_gradmon.write_summaries(optimizer, writer)
    writer.flush()
    return g_opt, d_opt, norms


def test_a_second_unnamed_optimizer_gets_the_scope_of_what_it_trains(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="keras_gradmon"):
        g_opt, d_opt, norms = _gan(str(tmp_path))
    assert g_opt.monitor.tags.scope is None  # the first stays unscoped
    assert d_opt.monitor.tags.scope == "discriminator"
    assert d_opt.monitor_config.tag_scope is None  # the user's options unchanged
    events = load_events(str(tmp_path))
    generator = scalar_series(events, "grad_norm/global")
    discriminator = scalar_series(events, "grad_norm/discriminator/global")
    assert list(generator) == list(discriminator) == [0, 1]
    np.testing.assert_allclose(list(generator.values()), norms["g"], rtol=1e-6)
    np.testing.assert_allclose(list(discriminator.values()), norms["d"], rtol=1e-6)
    norm_tags = {t for t in events.Tags()["tensors"] if t.startswith("grad_norm/")}
    assert norm_tags == {
        "grad_norm/global",
        "grad_norm/discriminator/global",
        *(f"grad_norm/{path}" for path in g_opt.monitor.paths),
        *(f"grad_norm/discriminator/{path}" for path in d_opt.monitor.paths),
    }
    # The announcement: one text entry in the log, one console line.
    texts = _texts(events, "tag_scope/")
    assert list(texts) == ["tag_scope/discriminator"]
    (text,) = texts["tag_scope/discriminator"]
    assert repr(d_opt.name) in text and "discriminator/" in text
    assert "`name=`" in text and repr(g_opt.name) in text
    lines = [r.getMessage() for r in caplog.records if "tag scope" in r.getMessage()]
    assert lines == [text]


def test_derived_scopes_are_the_same_when_built_again(tmp_path):
    first = _gan(str(tmp_path / "one"))
    second = _gan(str(tmp_path / "two"))  # other layer uids, other ids
    for g_opt, d_opt, _ in (first, second):
        assert (g_opt.monitor.tags.scope, d_opt.monitor.tags.scope) == (
            None,
            "discriminator",
        )
    one, two = load_events(str(tmp_path / "one")), load_events(str(tmp_path / "two"))
    # Per-variable tags differ by the layers' uids, the global ones do not.
    assert "grad_norm/discriminator/global" in two.Tags()["tensors"]
    assert {t for t in one.Tags()["tensors"] if t.endswith("/global")} == {
        t for t in two.Tags()["tensors"] if t.endswith("/global")
    }


def test_an_optimizer_of_two_models_falls_back_to_their_names(tmp_path):
    encoder, decoder, head = _model("encoder"), _model("decoder", 1), _model("head")
    first = GradientMonitorOptimizer(keras.optimizers.SGD(0.0), every_n_steps=1)
    both = GradientMonitorOptimizer(keras.optimizers.SGD(0.0), every_n_steps=1)
    variables = encoder.trainable_variables + decoder.trainable_variables
    log_dir = str(tmp_path)
    _step(first, head, 1.0)
    keras_gradmon.write_summaries(first, log_dir)
    both.apply([tf.ones_like(v) for v in variables], variables)
    keras_gradmon.write_summaries(both, log_dir)
    assert both.monitor.tags.scope == "encoder-decoder"
    events = load_events(log_dir)
    expected = np.sqrt(sum(np.prod(v.shape) for v in variables))
    (value,) = scalar_series(events, "grad_norm/encoder-decoder/global").values()
    assert value == pytest.approx(expected)
    assert list(scalar_series(events, "grad_norm/global")) == [0]


def _fit(optimizer, model: keras.Model, log_dir: str) -> keras.callbacks.History:
    x, y = data(n=32, features=4)
    model.compile(optimizer, LOSS)
    callback = GradientSummaryCallback(log_dir)
    return model.fit(x, y % 1, batch_size=16, verbose=0, callbacks=[callback])


def test_summary_callbacks_of_two_models_in_one_log_dir(tmp_path):
    first = GradientMonitorOptimizer(keras.optimizers.SGD(), every_n_steps=1)
    second = GradientMonitorOptimizer(keras.optimizers.SGD(), every_n_steps=1)
    _fit(first, _model("policy"), str(tmp_path))
    history = _fit(second, _model("value"), str(tmp_path))
    events = load_events(str(tmp_path))
    assert sorted(scalar_series(events, "grad_norm/global")) == [0, 1]
    scoped = scalar_series(events, "grad_norm/value/global")
    assert sorted(scoped) == [0, 1]
    # Keras logs follow the derived scope: the second model's own norm.
    assert history.history["grad_norm"] == [pytest.approx(scoped[1])]
    assert list(_texts(events, "tag_scope/")) == ["tag_scope/value"]


def test_two_wrappers_of_the_same_variables_are_a_true_tie(tmp_path):
    model = _model("twin")
    first = keras_gradmon.wrap(keras.optimizers.SGD(0.0), every_n_steps=1)
    second = keras_gradmon.wrap(keras.optimizers.SGD(0.0), every_n_steps=1)
    writer = tf.summary.create_file_writer(str(tmp_path))
    _step(first, model, 1.0)
    keras_gradmon.write_summaries(first, writer)
    _step(second, model, 2.0)
    pattern = r"would write unscoped tags to this writer: .*'twin'.*`name=`"
    with pytest.raises(ValueError, match=pattern):
        keras_gradmon.write_summaries(second, writer)
    assert second.monitor.tags.scope is None
    # A third, of other variables, still gets its scope.
    third = keras_gradmon.wrap(keras.optimizers.SGD(0.0), every_n_steps=1)
    _step(third, _model("other"), 1.0)
    assert keras_gradmon.write_summaries(third, writer)
    assert third.monitor.tags.scope == "other"


def test_a_named_wrapper_keeps_its_scope_and_a_derived_one_can_clash(tmp_path):
    named = keras_gradmon.wrap(keras.optimizers.SGD(0.0), name="critic")
    unnamed = keras_gradmon.wrap(keras.optimizers.SGD(0.0), every_n_steps=1)
    clash = keras_gradmon.wrap(keras.optimizers.SGD(0.0), every_n_steps=1)
    log_dir = str(tmp_path)
    _step(named, _model("actor"), 1.0)
    keras_gradmon.write_summaries(named, log_dir)
    _step(unnamed, _model("actor"), 1.0)
    keras_gradmon.write_summaries(unnamed, log_dir)
    assert (named.monitor.tags.scope, unnamed.monitor.tags.scope) == ("critic", None)
    _step(clash, _model("critic"), 1.0)  # derives "critic": the named one's
    with pytest.raises(ValueError, match="would write tag scope 'critic'"):
        keras_gradmon.write_summaries(clash, log_dir)


def test_alert_flags_use_the_derived_scope(tmp_path):
    checkers = []
    _gan(str(tmp_path / "gan"), tmp_path / "alerts", checkers)
    [checker] = checkers
    assert checker.check() == []
    events = load_events(str(tmp_path / "alerts"))
    flags = scalar_series(events, "alerts/discriminator/nonfinite")
    assert max(flags) == 1 and set(flags.values()) == {0.0}
    assert not [t for t in events.Tags()["tensors"] if t.count("/") == 1]


def test_use_scope_rebuilds_the_tag_table():
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.0), every_n_steps=1)
    _step(optimizer, _model("solo"), 3.0)
    monitor = optimizer.monitor
    assert monitor.tags.scope is None
    values, present = _values(optimizer)
    before = monitor.tags.scalar_values(values, present)
    before |= monitor.tags.table.table(values).scalars()
    monitor.use_scope("solo")
    after = monitor.tags.scalar_values(values, present)
    table = monitor.tags.table.table(values)
    assert table.tag == "keras_gradmon/solo/variables"
    after |= table.scalars()
    assert monitor.tags.scope == "solo"
    assert after == {
        name.replace("/", "/solo/", 1): value for name, value in before.items()
    }
    with pytest.raises(ValueError, match=r"scope.*'a/b'"):
        monitor.use_scope("a/b")


def _values(optimizer) -> tuple:
    snapshot = optimizer.snapshot()
    return snapshot.values, snapshot.has_grad


@pytest.mark.parametrize(
    "paths, scope",
    [
        (
            ["ActorNetwork/input_mlp/dense0/kernel", "ActorNetwork/action/bias"],
            "ActorNetwork",
        ),
        (
            ["CriticNetwork/value/kernel", "CriticNetwork2/value/kernel"],
            "CriticNetwork-CriticNetwork2",
        ),
        (["initial_log_alpha"], "initial_log_alpha"),
        (
            ["sequential_3/dense_7/kernel", "sequential_3/dense_7/bias"],
            "sequential.dense",
        ),
        (["a/x", "b/x", "c/x", "d/x"], "a-and-3-more"),
        (["model 1:a/dense_2/kernel", "model 1:a/dense_3/kernel"], "model_1_a"),
        (["w", "b"], "w-b"),
        (["layer_1/k", "layer_2/k"], "layer"),
    ],
)
def test_derived_scope_rule(paths, scope):
    assert derived_scope(paths) == scope
