import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_gradmon
from keras_gradmon import ActivationMonitor
from keras_gradmon.activations.monitor import ActivationOptions
from keras_gradmon.activations.probe import ACTIVATION_STATISTICS
from tests.activations import models
from tests.reference import histogram_series, load_events

BUILDERS = models.BUILDERS


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_statistics_match_numpy(kind):
    build, activations = BUILDERS[kind]
    model = build()
    x = models.probe_data()
    monitor = ActivationMonitor(model, x, histogram_buckets=12)
    snapshot = monitor.record(step=7)
    assert snapshot.step == 7 and snapshot.samples == len(x)
    assert dict(zip(snapshot.layers, snapshot.activations)) == activations
    models.assert_snapshot_matches(snapshot, model, x)
    if kind == "sequential":
        # The data exercises saturation for real.
        assert 0 < snapshot.stat("saturated_fraction")["seq/h2"] < 1


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_a_layer_is_named_by_the_prefix_of_its_variables_paths(kind):
    monitor = ActivationMonitor(BUILDERS[kind][0](), models.probe_data(8))
    for watched in monitor.watched:
        paths = [v.path for v in watched.layer.weights]
        assert paths and all(p.startswith(f"{watched.name}/") for p in paths)
        assert watched.name.split("/")[-1] == watched.layer.name


def test_layers_without_variables_are_named_in_the_same_scheme():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(4, name="inner_dense")(inputs)
    encoder = keras.Model(
        inputs, keras.layers.ReLU(name="inner_relu")(hidden), name="encoder"
    )
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(4, name="d"),
            keras.layers.Activation("tanh", name="act"),
            keras.layers.Dropout(0.5, name="drop"),
            encoder,
            keras.layers.Dense(2, name="head"),
        ],
        name="outer",
    )
    monitor = ActivationMonitor(model, models.probe_data(8)[:, :4], layers=".")
    paths = dict(zip([w.layer.name for w in monitor.watched], monitor.layer_names))
    # The nested functional model called its layers at the top: their
    # variables' paths (`inner_dense/kernel`) carry no `encoder/`.
    assert paths == {
        "d": "outer/d",
        "act": "outer/act",
        "drop": "outer/drop",
        "inner_dense": "inner_dense",
        "inner_relu": "inner_relu",
        "head": "outer/head",
    }
    assert model.get_layer("encoder").get_layer("inner_dense").kernel.path == (
        "inner_dense/kernel"
    )


@pytest.mark.parametrize("kind", ["sequential", "subclassed"])
def test_exactly_the_dead_units_are_reported(kind):
    model = BUILDERS[kind][0]()
    snapshot = ActivationMonitor(model, models.probe_data()).record(0)
    h1 = models.H1[kind]
    assert snapshot.dead_units[h1].tolist() == models.DEAD
    assert snapshot.stat("dead_fraction")[h1] == len(models.DEAD) / 8
    others = [layer for layer in snapshot.layers if layer != h1]
    assert all(snapshot.dead_units[layer].size == 0 for layer in others)


@pytest.mark.parametrize(("dead", "alerts"), [(3, 0), (4, 1)])
def test_a_dead_fraction_equal_to_the_threshold_is_not_above_it(dead, alerts):
    # 3 of 10 units dead is 0.3 exactly: not above `dead_fraction=0.3`
    # (in float32 it would be 0.30000001).
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((models.FEATURES,)), keras.layers.Dense(10, activation="relu")]
    )
    kernel, bias = model.layers[0].get_weights()
    bias[:dead] = -1e3
    model.layers[0].set_weights([kernel, bias])
    monitor = ActivationMonitor(
        model, models.probe_data(), std_band=None, dead_fraction=0.3
    )
    snapshot = monitor.record(0)
    assert list(snapshot.stat("dead_fraction").values()) == [dead / 10]
    assert len(monitor.alerts) == alerts


def test_a_unit_alive_on_one_sample_is_not_dead():
    model = models.sequential()
    x = models.probe_data()
    h1 = model.get_layer("h1")
    kernel, bias = h1.get_weights()
    # Unit 0 fires only for inputs with x[:, 0] > 3: one sample here.
    kernel[:, 0] = 0.0
    kernel[0, 0] = 1.0
    bias[0] = -3.0
    h1.set_weights([kernel, bias])
    x[:, 0] = np.minimum(x[:, 0], 2.0)
    x[5, 0] = 4.0
    snapshot = ActivationMonitor(model, x, layers=["h1"]).record(0)
    assert snapshot.dead_units["seq/h1"].tolist() == models.DEAD
    x[5, 0] = 2.0
    snapshot = ActivationMonitor(model, x, layers=["h1"]).record(0)
    assert snapshot.dead_units["seq/h1"].tolist() == sorted([0, *models.DEAD])


def test_layer_selection_by_paths_names_and_regex():
    model = models.sequential()
    x = models.probe_data(8)
    paths = ["seq/h1", "seq/h2", "seq/h3"]
    assert ActivationMonitor(model, x).layer_names == paths
    assert ActivationMonitor(model, x, layers=["head", "seq/h1"]).layer_names == [
        "seq/head",
        "seq/h1",
    ]
    assert ActivationMonitor(model, x, layers=r"^h[23]$").layer_names == paths[1:]
    assert ActivationMonitor(model, x, layers=r"^seq/h1").layer_names == paths[:1]


def test_a_name_two_layers_share_must_be_given_as_a_path():
    keras.utils.set_random_seed(0)
    twins = [
        keras.Sequential([keras.layers.Dense(3, activation="relu", name="d")], name=n)
        for n in ("left", "right")
    ]
    inputs = keras.Input((models.FEATURES,))
    model = keras.Model(inputs, [twin(inputs) for twin in twins])
    x = models.probe_data(8)
    assert ActivationMonitor(model, x).layer_names == ["left/d", "right/d"]
    assert ActivationMonitor(model, x, layers=["right/d"]).layer_names == ["right/d"]
    with pytest.raises(ValueError, match=r"names \['d'\] of the model.*'left/d'"):
        ActivationMonitor(model, x, layers=["d"])


def test_probe_is_traced_once_and_runs_without_python():
    model = models.sequential()
    traces = []

    def forward(batch):
        traces.append(1)
        return model(batch, training=False)

    monitor = ActivationMonitor(model, models.probe_data(), forward=forward)
    for step in range(0, 500, 100):
        monitor.update(step)
    assert len(traces) == 1
    # The hooks are gone: the layers are as they were.
    assert all("call" not in vars(layer) for layer in model.layers)


def test_state_is_for_the_jax_backend():
    monitor = ActivationMonitor(models.sequential(), models.probe_data(8))
    with pytest.raises(ValueError, match="`state` is for the JAX backend"):
        monitor.update(0, state=([], []))
    assert monitor.latest is None


def test_update_measures_on_due_steps_once_each():
    monitor = ActivationMonitor(
        models.sequential(), models.probe_data(16), every_n_steps=3
    )
    measured = [s for s in [0, 0, 1, 2, 3, 3, 4, 6] if monitor.update(s)]
    assert measured == [0, 3, 6]
    monitor = ActivationMonitor(
        models.sequential(), models.probe_data(16), every_n_steps=lambda s: s in (2, 5)
    )
    assert [s for s in range(7) if monitor.update(tf.constant(s, tf.int32))] == [2, 5]


def test_event_file_holds_the_snapshot(tmp_path):
    model = models.sequential()
    x = models.probe_data()
    monitor = ActivationMonitor(
        model, x, log_dir=str(tmp_path), histogram_buckets=10, tag_scope="q",
        dead_fraction=0.25,
    )
    first = monitor.record(0)
    second = monitor.record(5)
    monitor.flush()
    events = load_events(str(tmp_path))
    tags = set(events.Tags()["tensors"])
    assert "activation_saturated_fraction/q/seq/h2" in tags
    assert "activation_saturated_fraction/q/seq/h1" not in tags  # relu
    for name in ACTIVATION_STATISTICS:
        for layer, value in first.stat(name).items():
            series = {
                e.step: float(tf.make_ndarray(e.tensor_proto))
                for e in events.Tensors(f"activation_{name}/q/{layer}")
            }
            assert series[0] == pytest.approx(value, nan_ok=True)
            assert series[5] == pytest.approx(second.stat(name)[layer], nan_ok=True)
    histograms = histogram_series(events, "activation_hist/q/seq/h1")
    assert histograms[0][:, 2].sum() == x.shape[0] * 8
    flags = {
        e.step: float(tf.make_ndarray(e.tensor_proto))
        for e in events.Tensors("alerts/q/dead_fraction")
    }
    assert flags == {0: 1.0, 5: 1.0}  # 3 of 8 dead > 0.25
    flags = {
        e.step: float(tf.make_ndarray(e.tensor_proto))
        for e in events.Tensors("alerts/q/dead_units")
    }
    assert flags == {0: 0.0, 5: 0.0}  # steady: the own-level rule is silent


def test_alerts_name_the_layer_and_run_actions(tmp_path, caplog):
    model = models.sequential()
    x = models.probe_data()
    with caplog.at_level("WARNING", logger="keras_gradmon"):
        monitor = ActivationMonitor(
            model,
            x,
            layers=["h1"],
            dead_fraction=0.25,
            jsonl_path=str(tmp_path / "alerts.jsonl"),
            actions={"warning": "stop"},
        )
        monitor.record(0)
    (alert,) = monitor.alerts
    assert (alert.rule, alert.subject, alert.value) == ("threshold", "seq/h1", 0.375)
    assert "activation_dead_fraction of 'seq/h1' = 0.375 > 0.25" in caplog.text
    assert monitor.stop_requested
    assert (tmp_path / "alerts.jsonl").read_text().count("\n") == 1
    with pytest.raises(keras_gradmon.GradientAlertError, match="'seq/h1'"):
        ActivationMonitor(
            model, x, dead_fraction=0.25, actions={"warning": "raise"}
        ).record(0)


def test_band_alert_for_an_exploding_layer():
    model = models.sequential()
    h1 = model.get_layer("h1")
    kernel, bias = h1.get_weights()
    h1.set_weights([kernel * 100, bias])
    monitor = ActivationMonitor(model, models.probe_data(), std_band=(0.05, 20.0))
    for step in range(3):
        monitor.record(step)
    assert [(a.subject, a.comparison, a.step) for a in monitor.alerts] == [
        ("seq/h1", ">", 2)
    ]


def test_a_layer_the_pass_skips_is_reported_as_not_reached():
    model = models.sequential()
    x = models.probe_data(16)
    # Runs h1 and the head only, skipping h2 and h3.
    monitor = ActivationMonitor(
        model,
        x,
        layers=["h1", "h2"],
        forward=lambda b: model.get_layer("h1")(b),
    )
    snapshot = monitor.record(0)
    assert snapshot.reached.tolist() == [True, False]
    assert "seq/h2" not in snapshot.stat("mean")
    assert np.isnan(snapshot.stats[1]).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"layers": ["h1", "nope"]},
            r"`layers` names \['nope'\] of the model.*The model's layers: "
            r"\['seq/h1', 'seq/h2', 'seq/h3', 'seq/head'\]",
        ),
        ({"layers": "^x"}, r"matches no layer.*Received: layers='\^x'"),
        ({"layers": 3}, "Received: layers=3"),
        ({"data": None}, "Received: data=None"),
        ({"data": np.float32(1.0)}, "leading sample axis"),
        ({"every_n_steps": 0}, "`every_n_steps` must be a positive integer"),
        ({"histogram_buckets": 0}, "Received: histogram_buckets=0"),
        ({"std_band": (2.0, 1.0)}, "`low` must be smaller than `high`"),
        ({"dead_fraction": 0.0}, "Received: dead_fraction=0.0"),
        ({"actions": {"warning": "panic"}}, "Received: actions\\['warning'\\]"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, message):
    options = {"data": models.probe_data(4), **kwargs}
    with pytest.raises(ValueError, match=message):
        ActivationMonitor(models.sequential(), **options)


def test_a_model_without_hidden_activations_needs_layer_names():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="out")])
    with pytest.raises(ValueError, match=r"no layer with a hidden activation.*/out'"):
        ActivationMonitor(model, np.zeros((4, 3), "float32"))
    assert ActivationMonitor(model, np.zeros((4, 3), "float32"), layers=["out"])


def test_an_options_object_with_keyword_overrides():
    model, x = models.sequential(), models.probe_data(8)
    options = ActivationOptions(data=x, layers=["h1", "h2"], every_n_steps=5)
    monitor = ActivationMonitor(model, options, every_n_steps=3, dead_fraction=0.3)
    assert monitor.layer_names == ["seq/h1", "seq/h2"]
    assert [monitor.due(s) for s in range(7)] == [1, 0, 0, 1, 0, 0, 1]
    assert sorted(monitor.engine.rules) == [
        "activation_collapse",
        "activation_nonfinite",
        "dead_fraction",
        "dead_units",
    ]
    assert options.every_n_steps == 5  # the given object is left as it was


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((), {"every_n_step": 3}, TypeError, "unknown argument every_n_step=3"),
        ((), {"every_n_step": 3}, ValueError, "its options are: data, layers, "),
        ((models.probe_data(4),), {"data": 1}, ValueError, "probe batch twice"),
    ],
)
def test_bad_keywords_name_the_argument(args, kwargs, error, message):
    options = {"data": models.probe_data(4)} if not args else {}
    with pytest.raises(error, match=message):
        ActivationMonitor(models.sequential(), *args, **options, **kwargs)
    with pytest.raises(error, match=message):
        keras_gradmon.ActivationMonitorCallback(*args, **options, **kwargs)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_a_recurrent_layer_is_measured_by_its_output_not_its_cell(kind):
    # The cell runs inside the loop over time steps: reading its outputs
    # from the probe failed (InaccessibleTensorError), during `fit` too.
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((5, 3)),
            getattr(keras.layers, kind)(4, name="rnn"),
            keras.layers.Dense(2, activation="relu", name="h"),
            keras.layers.Dense(1, name="head"),
        ],
        name="rec",
    )
    x = np.random.default_rng(0).normal(size=(16, 5, 3)).astype("float32")
    monitor = ActivationMonitor(model, x)
    # The recurrent layer's variables sit under its cell (`rec/rnn/<cell>/...`).
    assert monitor.layer_names == ["rec/rnn", "rec/h"]
    snapshot = monitor.record(step=1)
    rnn = keras.Model(model.inputs, model.get_layer("rnn").output)(x).numpy()
    want = pytest.approx(float(np.std(rnn)), rel=1e-5)
    assert snapshot.stat("std")["rec/rnn"] == want
    # A fresh recurrent layer's output is small (about 0.04 here): the std
    # band is not applied to it.
    assert list(snapshot.activations) == ["recurrent", "relu"]
    assert keras_gradmon.activations.monitor.activation_metrics(snapshot)[
        "activation_std"
    ].keys() == {"rec/h"}
    callback = keras_gradmon.ActivationMonitorCallback(x, every_n_steps=1)
    # The probe is a `tf.function` of its own: the fit needs no XLA.
    model.compile("adam", "mse", jit_compile=False)
    model.fit(x, x[:, 0, :1], epochs=2, verbose=0, callbacks=[callback])
    assert callback.monitor.latest.step == 1
