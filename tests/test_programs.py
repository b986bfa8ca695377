"""Programs of the train function, chosen on the host
(`keras_gradmon.programs`): during `fit` with `GradientMonitorCallback` the
steps with nothing due run a program with no measurement in it, the steps
the host knows have their statistics due one that measures them with no
conditional, and what is recorded, and the weights, stay what one program
gives."""

import re
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_gradmon
from keras_gradmon.programs import Programs, build_before_tracing
from keras_gradmon.schedule import measuring
from tests.reference import histogram_series, load_events, scalar_series

BATCH, STEPS_PER_EPOCH = 32, 10


def _data():
    rng = np.random.default_rng(0)
    x = rng.random((BATCH * STEPS_PER_EPOCH, 16), np.float32)
    return x, rng.integers(0, 4, BATCH * STEPS_PER_EPOCH)


def _model(optimizer, jit_compile=True):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(8, activation="relu"),
         keras.layers.Dense(4)]
    )  # fmt: skip
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile)
    return model


def _fit(model, log_dir, epochs=2):
    callback = keras_gradmon.GradientMonitorCallback(str(log_dir), alerts=False)
    x, y = _data()
    model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=[callback])


@pytest.fixture(scope="module", autouse=True)
def impatient():
    """The idle program from the second call (its default waits until the
    run has lasted as long as the first call: longer than these fits)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Programs, "patience", 0.0)
        yield


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A plain and a monitored model (every 4 steps, histograms every 7),
    fitted 2 epochs of 10 steps each."""
    x, y = _data()
    plain = _model(keras.optimizers.Adam(1e-2))
    plain.fit(x, y, batch_size=BATCH, epochs=2, verbose=0)
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-2), every_n_steps=4, histogram_every_n_steps=7
    )
    model = _model(optimizer)
    log_dir = tmp_path_factory.mktemp("programs")
    _fit(model, log_dir)
    return plain, model, log_dir


def test_weights_are_those_of_the_unwrapped_optimizer_bit_for_bit(fitted):
    plain, model, _ = fitted
    for want, got in zip(plain.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)


def test_the_due_steps_and_only_they_are_recorded(fitted):
    _, model, log_dir = fitted
    events = load_events(str(log_dir))
    assert sorted(scalar_series(events, "grad_norm/global")) == [0, 4, 8, 12, 16]
    path = model.layers[0].kernel.path
    assert sorted(histogram_series(events, f"grad_hist/{path}")) == [0, 7, 14]


def test_steps_with_nothing_due_run_the_idle_program(fitted):
    _, model, _ = fitted
    # The measuring program: 0 (the first call, which measures the steps a
    # batch takes), 7 and 14 (histograms); the due program: 4, 8, 12, 16
    # (statistics alone); 10, the second epoch's first step, is idle.
    calls = {"measuring": 3, "due": 4, "idle": 13}
    assert Programs.made_for(model).calls == calls


class TracedAdam(keras.optimizers.Adam):
    """Adam counting its updates made in Python: one a variable each time a
    compiled step is traced (the compiled step runs none)."""

    made = 0

    def update_step(self, gradient, variable, learning_rate):
        self.made += 1
        return super().update_step(gradient, variable, learning_rate)


def test_a_fit_with_the_callback_traces_the_train_step_once(tmp_path):
    """Keras on TensorFlow builds the optimizer inside the train function's
    first trace, and a `tf.function` whose first trace makes variables is
    traced again: the callback builds it first (`build_before_tracing`)."""
    inner = TracedAdam(1e-2)
    model = _model(keras_gradmon.GradientMonitorOptimizer(inner, every_n_steps=4))
    x, y = _data()
    callback = keras_gradmon.GradientMonitorCallback(str(tmp_path), alerts=False)
    model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, verbose=0, callbacks=[callback])
    assert inner.made == len(model.trainable_variables)  # one trace
    assert scalar_series(load_events(str(tmp_path)), "grad_norm/global").keys() == {0}


def test_the_optimizer_is_built_before_tracing_only_where_every_layer_is():
    unbuilt = keras.Sequential([keras.layers.Dense(3)])  # no input shape yet
    optimizer = keras_gradmon.GradientMonitorOptimizer(keras.optimizers.Adam())
    unbuilt.compile(optimizer=optimizer, loss="mse")
    assert not build_before_tracing(unbuilt, optimizer)
    assert not optimizer.built
    model = _model(keras_gradmon.GradientMonitorOptimizer(keras.optimizers.Adam()))
    assert not build_before_tracing(model, keras.optimizers.Adam())  # not its own
    assert build_before_tracing(model, model.optimizer)
    assert model.optimizer.built
    assert not build_before_tracing(model, model.optimizer)  # built already


@pytest.fixture(scope="module")
def one_program(tmp_path_factory):
    """The fit of `fitted`'s monitored model with the patience of a real
    run: 20 steps take less than the first call's compile, so the
    measuring program runs every call."""
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-2), every_n_steps=4, histogram_every_n_steps=7
    )
    model = _model(optimizer)
    log_dir = tmp_path_factory.mktemp("one_program")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Programs, "patience", 1.0)
        _fit(model, log_dir)
    return model, log_dir


def test_the_due_program_records_what_the_measuring_one_does(fitted, one_program):
    """The same fit with one program (the measuring one, every call):
    the same steps recorded, the same numbers (to float32 rounding: XLA
    fuses the reductions differently without the conditional)."""
    _, _, log_dir = fitted
    one, one_dir = one_program
    assert Programs.made_for(one).calls == {"measuring": 20, "due": 0, "idle": 0}
    want, got = load_events(str(one_dir)), load_events(str(log_dir))
    for tag in ("grad_norm/global", "weight_norm/global", "update_ratio/global"):
        expected, actual = scalar_series(want, tag), scalar_series(got, tag)
        assert sorted(actual) == [0, 4, 8, 12, 16] == sorted(expected), tag
        for step, value in expected.items():
            np.testing.assert_allclose(actual[step], value, rtol=1e-6, err_msg=tag)


def test_after_fit_the_model_measures_again_and_a_second_fit_reuses_both(
    fitted, tmp_path
):
    _, model, _ = fitted
    programs = Programs.made_for(model)
    assert model.train_function is programs.measuring
    _fit(model, tmp_path, epochs=1)  # steps 20 to 29: 20, 21, 24, 28 due
    assert Programs.made_for(model) is programs
    # 20 (the fit's first call), 21 and 28 (histograms) measure; 24 due.
    assert programs.calls == {"measuring": 6, "due": 5, "idle": 19}
    events = load_events(str(tmp_path))
    assert sorted(scalar_series(events, "grad_norm/global")) == [20, 24, 28]


def test_a_call_nobody_planned_for_measures():
    calls = []
    both = Programs(lambda: calls.append("measuring"), lambda: calls.append("idle"))
    both()
    both.plan(due=False)
    both.plan(due=True)  # two callbacks: one has something due
    both()
    both.plan(due=False)
    both()
    assert calls == ["measuring", "measuring", "idle"]


def test_the_idle_program_waits_until_the_run_has_lasted_its_first_call(
    monkeypatch,
):
    monkeypatch.setattr(Programs, "patience", 1.0)
    calls = []

    def measure():
        if not calls:
            time.sleep(0.2)  # the first call: a trace and a compile
        calls.append("measuring")

    both = Programs(measure, lambda: calls.append("idle"))
    for _ in range(3):
        both.plan(due=False)
        both()
    # Not yet 0.2 s since the first call ended: the measuring program.
    assert calls == ["measuring"] * 3 and both.calls["idle"] == 0
    time.sleep(max(both.idle_from - time.monotonic(), 0.0) + 0.01)
    both.plan(due=False)
    both()
    assert calls[-1] == "idle"


def test_a_fit_shorter_than_its_compile_builds_one_program(one_program):
    model, log_dir = one_program
    programs = Programs.made_for(model)
    assert programs.calls == {"measuring": 20, "idle": 0, "due": 0}
    events = load_events(str(log_dir))
    assert sorted(scalar_series(events, "grad_norm/global")) == [0, 4, 8, 12, 16]
    path = model.layers[0].kernel.path
    assert sorted(histogram_series(events, f"grad_hist/{path}")) == [0, 7, 14]


@pytest.mark.parametrize("option", ["skip_nonfinite", "skip_spikes"])
def test_one_program_where_a_step_can_be_skipped(option, tmp_path):
    """A skipped step does not advance the step count, so the host cannot
    tell the due steps: the measuring program runs every step."""
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-2), every_n_steps=4, **{option: True}
    )
    model = _model(optimizer, jit_compile=False)  # decided on the host
    _fit(model, tmp_path, epochs=1)
    assert Programs.made_for(model) is None
    events = load_events(str(tmp_path))
    assert sorted(scalar_series(events, "grad_norm/global")) == [0, 4, 8]


def _hlo_ops(step, *args) -> list[str]:
    """The opcodes of `step`'s HLO (names and parameters left out)."""
    text = step.experimental_get_compiler_ir(*args)(stage="hlo")
    ops = []
    for line in text.splitlines():
        found = re.search(r" = .*?\s([a-z][\w-]*)\(", line)
        if found and found.group(1) != "parameter":
            ops.append(found.group(1))
    return sorted(ops)


def test_the_idle_program_is_the_unwrapped_step_op_for_op():
    """How we check it on TensorFlow: the XLA HLO of a train step traced
    under `measuring(False)` has the opcodes of the unwrapped step's, one
    for one (no conditional, nothing weight-sized written)."""
    x, y = (tf.constant(a) for a in _data())

    def step_of(optimizer):
        model = _model(optimizer)
        model.optimizer.build(model.trainable_variables)

        @tf.function(jit_compile=True, autograph=False)
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = model.compute_loss(x=x, y=y, y_pred=model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            model.optimizer.apply(grads, model.trainable_variables)

        return step

    plain = _hlo_ops(step_of(keras.optimizers.Adam(1e-2)), x, y)
    def wrapped():
        inner = keras.optimizers.Adam(1e-2)
        return step_of(keras_gradmon.GradientMonitorOptimizer(inner))

    with measuring(False):
        idle = _hlo_ops(wrapped(), x, y)
    measuring_ops = _hlo_ops(wrapped(), x, y)
    assert idle == plain
    assert "conditional" in measuring_ops and "conditional" not in idle


def test_several_steps_a_call_measure_where_one_of_them_is_due(tmp_path):
    """With `steps_per_execution=4` a call runs up to 4 steps: the
    measuring program runs for a call that holds a due step (every 6: 0, 6,
    12, 18), the idle one for steps [8, 10) and [14, 18) (epochs of 10
    steps: calls [0, 4), [4, 8), [8, 10), then [10, 14), [14, 18), [18, 20))."""
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-2), every_n_steps=6, histogram_every_n_steps=None
    )
    model = _model(optimizer)
    # Which program runs is decided on the host: no XLA compile needed
    # (test_callback.py writes each summary of such calls under XLA).
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=False,
        steps_per_execution=4,
    )
    _fit(model, tmp_path, epochs=2)
    assert Programs.made_for(model).calls == {"measuring": 4, "idle": 2, "due": 0}
    events = load_events(str(tmp_path))
    assert sorted(scalar_series(events, "grad_norm/global")) == [0, 6, 12, 18]


def test_with_the_alert_rules_a_histogram_only_summary_is_no_miss(tmp_path):
    # Steps 7 and 14 record histograms alone: the rules' look finds no new
    # scalar summary there, and that must not read as a missed one (which
    # would make the next calls measure until the next summary).
    optimizer = keras_gradmon.GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-2), every_n_steps=4, histogram_every_n_steps=7
    )
    model = _model(optimizer)
    callback = keras_gradmon.GradientMonitorCallback(str(tmp_path))  # rules on
    x, y = _data()
    model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[callback])
    assert Programs.made_for(model).calls == {"measuring": 3, "due": 4, "idle": 13}
    assert callback.checker.checked_step == 16
