"""The `tf.compat.v1.train` adapter's own contract (issue 13, section 2), and
the errors for what `wrap` cannot wrap."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
import tensorflow as tf

import keras_gradmon
from keras_gradmon.columns import COLUMNS
from keras_gradmon.legacy.tf_v1 import V1GradientMonitorOptimizer
from tests.conftest import compile_fn
from tests.reference import (
    assert_statistics_close,
    histogram_series,
    load_events,
    reference_histogram,
    reference_statistics,
    scalar_series,
)

V1 = tf.compat.v1.train
FAMILY = {
    "GradientDescent": lambda: V1.GradientDescentOptimizer(0.1),
    "Momentum": lambda: V1.MomentumOptimizer(0.1, momentum=0.9, use_nesterov=True),
    "RMSProp": lambda: V1.RMSPropOptimizer(0.01, momentum=0.5, centered=True),
    "Adagrad": lambda: V1.AdagradOptimizer(0.1),
    "Adam": lambda: V1.AdamOptimizer(0.01),
}
#: Gradients of three steps for the variables of `_variables()`; the bias has
#: none at the second step.
GRADS = [
    [[[0.5, -1.0], [2.0, 0.0]], [0.25, -0.75]],
    [[[-3.0, 1.5], [0.125, 4.0]], None],
    [[[1.0, 1.0], [-2.0, 0.5]], [1e-3, 2.0]],
]


#: A monitor that records little (cheap to trace), every step.
LEAN = {"every_n_steps": 1, "statistics": ("norm",), "weight_statistics": False}


def _variables() -> list[tf.Variable]:
    return [
        tf.Variable([[1.0, -2.0], [0.5, 3.0]], name="dense/kernel"),
        tf.Variable([0.1, -0.2], name="dense/bias"),
    ]


def _grads(step: int) -> list:
    return [None if g is None else tf.constant(g, tf.float32) for g in GRADS[step]]


def _state(optimizer, variables) -> list[np.ndarray]:
    """The variables, each slot of each, and the optimizer's other state."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    names = inner.get_slot_names()
    slots = [inner.get_slot(v, n) for v in variables for n in names]
    refs = {s.ref() for s in slots}
    rest = sorted((v for v in inner.variables() if v.ref() not in refs), key=str)
    return [v.numpy() for v in [*variables, *slots, *rest]]


# What the wrapper is ------------------------------------------------------------


def test_is_a_v1_optimizer():
    inner = V1.AdamOptimizer(1e-3)
    for wrapper in (
        keras_gradmon.wrap(inner),
        keras_gradmon.GradientMonitorOptimizer(V1.AdamOptimizer(1e-3)),
    ):
        assert isinstance(wrapper, V1GradientMonitorOptimizer)
        assert isinstance(wrapper, V1.Optimizer)
    parameters = inspect.signature(wrapper.apply_gradients).parameters
    assert list(parameters) == ["grads_and_vars", "global_step", "name"]
    assert parameters["global_step"].default is None
    assert keras_gradmon.wrap(V1.AdamOptimizer(1e-3), name="critic").get_name() == (
        "critic"
    )


#: XLA with Adam only: the wrapper runs the same code for each inner
#: optimizer; Adam has both per-variable slots and shared state (its beta
#: powers).
FAMILY_CASES = [
    pytest.param(mode, name, id=f"{mode}-{name}")
    for mode in ("eager", "function", "xla")
    for name in FAMILY
    if mode != "xla" or name == "Adam"
]


def _run_family(mode: str, name: str) -> tuple[list, object]:
    """`name` unwrapped and wrapped, three steps each in `mode`: the states
    (variables, slots, other state) of both, and the wrapper."""
    states = []
    for wrapped in (False, True):
        variables, optimizer = _variables(), FAMILY[name]()
        if wrapped:
            optimizer = keras_gradmon.wrap(
                optimizer, every_n_steps=1, histogram_every_n_steps=2
            )

        def apply(grads, optimizer=optimizer, variables=variables):
            optimizer.apply_gradients(zip(grads, variables))

        step = compile_fn(apply, mode)
        for i in range(3):
            step(_grads(i))
        states.append(_state(optimizer, variables))
    return states, optimizer


@pytest.fixture(scope="module")
def xla_adam(tmp_path_factory):
    """The XLA Adam run of `_run_family`, under a default writer (on the
    returned folder) that it writes nothing to, and a marker written after."""
    path = tmp_path_factory.mktemp("xla_adam")
    writer = tf.summary.create_file_writer(str(path / "graph"))
    with writer.as_default():
        states, wrapper = _run_family("xla", "Adam")
        tf.summary.scalar("marker", 1.0, step=0)
    writer.flush()
    return states, wrapper, path


@pytest.mark.parametrize("mode, name", FAMILY_CASES)
def test_family_is_bit_identical_to_unwrapped(mode, name, request):
    if (mode, name) == ("xla", "Adam"):
        states, optimizer, _ = request.getfixturevalue("xla_adam")
    else:
        states, optimizer = _run_family(mode, name)
    assert len(states[0]) == len(states[1])
    for plain, monitored in zip(*states):
        np.testing.assert_array_equal(monitored, plain)
    assert optimizer.snapshot().step == 2  # its own count of apply_gradients


def test_slots_variables_and_compute_gradients():
    inner = V1.AdamOptimizer(0.01)
    wrapper = keras_gradmon.wrap(inner, every_n_steps=1)
    w, b = _variables()
    assert wrapper.variables() == inner.variables() == []
    wrapper.apply_gradients(zip(_grads(0), [w, b]))
    assert wrapper.get_slot_names() == inner.get_slot_names() == ["m", "v"]
    assert wrapper.get_slot(w, "m") is inner.get_slot(w, "m")
    assert wrapper.get_slot(w, "v") is not None
    refs = {v.ref() for v in wrapper.variables()}
    assert {v.ref() for v in inner.variables()} < refs
    assert {wrapper.monitor.state.scalars.steps.ref()} < refs

    def loss():
        return tf.reduce_sum(w * w) + tf.reduce_sum(b)

    got = wrapper.compute_gradients(loss, var_list=[w, b])
    want = inner.compute_gradients(loss, var_list=[w, b])
    for (g1, v1), (g2, v2) in zip(got, want):
        assert v1 is v2
        np.testing.assert_array_equal(g1.numpy(), g2.numpy())


def test_minimize_with_global_step():
    variables = [_variables() for _ in range(2)]
    steps = [tf.Variable(5, dtype=tf.int64) for _ in range(2)]
    optimizers = [
        V1.MomentumOptimizer(0.1, 0.9),
        keras_gradmon.wrap(V1.MomentumOptimizer(0.1, 0.9), every_n_steps=1),
    ]
    for optimizer, (w, b), step in zip(optimizers, variables, steps):
        for _ in range(2):
            optimizer.minimize(
                lambda w=w, b=b: tf.reduce_sum(w**2) + tf.reduce_sum(b * w[0]),
                var_list=[w, b],
                global_step=step,
            )
    for plain, monitored in zip(*variables):
        np.testing.assert_array_equal(monitored.numpy(), plain.numpy())
    assert int(steps[1]) == int(steps[0]) == 7  # incremented once per step
    assert optimizers[1].snapshot().step == 6


# The step ---------------------------------------------------------------------


def test_step_rule(tmp_path):
    """`global_step` (of any integer dtype: int32 for one wrapper, int64 for
    the other) when given, else `step=` (int64, as tf.summary needs), else
    the wrapper's own count; the summaries are written at the same steps."""
    variables = _variables()
    step = tf.Variable(40, dtype=tf.int64)
    global_steps = {
        "own": tf.Variable(7, dtype=tf.int32),
        "given": tf.Variable(7, dtype=tf.int64),
    }
    own, given = (
        keras_gradmon.wrap(V1.GradientDescentOptimizer(0.1), name=n, **LEAN, **s)
        for n, s in (("own", {}), ("given", {"step": step}))
    )

    @tf.function
    def train(grads, with_global_step):
        pairs = list(zip(grads, variables))
        for optimizer in (own, given):
            if with_global_step:
                global_step = global_steps[optimizer.get_name()]
                optimizer.apply_gradients(pairs, global_step=global_step)
            else:
                optimizer.apply_gradients(pairs)

    writer = tf.summary.create_file_writer(str(tmp_path))
    recorded = []
    with writer.as_default():
        for i, with_global_step in enumerate((False, False, True, True)):
            train(_grads(2 * (i % 2)), with_global_step)
            recorded.append((own.snapshot().step, given.snapshot().step))
    writer.flush()
    # v1 optimizers increment `global_step` once a step.
    assert recorded == [(0, 40), (1, 40), (7, 7), (8, 8)]
    assert [int(v) for v in global_steps.values()] == [9, 9] and int(step) == 40
    events = load_events(str(tmp_path))
    assert sorted(scalar_series(events, "grad_norm/own/global")) == [0, 1, 7, 8]
    assert sorted(scalar_series(events, "grad_norm/given/global")) == [7, 8, 40]


def test_step_must_be_an_integer_variable():
    for step in (3, tf.constant(3), tf.Variable(3.0)):
        with pytest.raises(ValueError, match=r"`step` must be an integer tf\.Variable"):
            keras_gradmon.wrap(V1.AdamOptimizer(), step=step)


# What it records ----------------------------------------------------------------


def test_statistics_groups_and_histograms_match_numpy(mode):
    variables = _variables()
    wrapper = keras_gradmon.wrap(
        V1.AdamOptimizer(0.01),
        every_n_steps=1,
        histogram_every_n_steps=1,
        histogram_buckets=5,
        groups={"kernels": "kernel$", "everything": "dense"},
    )
    step = compile_fn(
        lambda grads: wrapper.apply_gradients(zip(grads, variables)), mode
    )
    for i in range(3):
        weights = [v.numpy() for v in variables]
        step(_grads(i))
        snapshot, histograms = wrapper.snapshot(), wrapper.histogram_snapshot()
        assert snapshot.step == histograms.step == i
        present = [g is not None for g in GRADS[i]]
        grads = [np.asarray(g, np.float64) for g in GRADS[i] if g is not None]
        norm = np.sqrt(sum(np.sum(g**2) for g in grads))
        assert snapshot.totals["grad_norm"] == pytest.approx(norm, rel=1e-6)
        assert snapshot.totals["grad_missing"] == float(not all(present))
        groups = dict(zip(snapshot.groups, snapshot.group_grad_norm))
        assert groups["kernels"] == pytest.approx(np.linalg.norm(GRADS[i][0]), 1e-6)
        assert groups["everything"] == pytest.approx(norm, rel=1e-6)
        for variable, grad, weight in zip(variables, GRADS[i], weights):
            row = snapshot.paths.index(variable.name[:-2])
            assert snapshot.has_grad[row] == (grad is not None)
            expected = reference_statistics(weight)
            actual = dict(zip(COLUMNS, snapshot.weight[row]))
            assert_statistics_close(actual, expected)
            if grad is None:
                continue
            actual = dict(zip(COLUMNS, snapshot.grad[row]))
            assert_statistics_close(actual, reference_statistics(grad))
            counts, low, high = reference_histogram(grad, 5)
            np.testing.assert_array_equal(histograms.grad_counts[row], counts)
            assert histograms.grad_range[row] == pytest.approx([low, high])


def test_in_graph_summaries(tmp_path):
    variables = _variables()
    wrapper = keras_gradmon.wrap(
        V1.AdamOptimizer(0.01), every_n_steps=2, histogram_every_n_steps=3
    )
    step = tf.function(lambda grads: wrapper.apply_gradients(zip(grads, variables)))
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        for i in range(5):
            step(_grads(i % 3))
    writer.flush()
    events = load_events(str(tmp_path))
    norms = scalar_series(events, "grad_norm/global")
    assert sorted(norms) == [0, 2, 4]
    for i, value in norms.items():
        grads = [np.asarray(g, np.float64) for g in GRADS[i % 3] if g is not None]
        assert value == pytest.approx(np.sqrt(sum(np.sum(g**2) for g in grads)))
    bias = scalar_series(events, "grad_norm/dense/bias")
    assert sorted(bias) == [0, 2]  # no gradient at steps 1 and 4
    assert bias[2] == pytest.approx(np.linalg.norm(GRADS[2][1]))
    hist = histogram_series(events, "grad_hist/dense/kernel")
    assert sorted(hist) == [0, 3]
    assert hist[3][:, 2].sum() == 4  # four elements


def test_xla_records_but_writes_nothing(xla_adam):
    _, wrapper, path = xla_adam  # three steps under a writer, in XLA
    norms = [
        np.linalg.norm(np.concatenate([np.ravel(g) for g in grads if g is not None]))
        for grads in GRADS
    ]
    totals = wrapper.snapshot().totals
    assert totals["grad_norm"] == pytest.approx(norms[2], rel=1e-6)
    assert set(load_events(str(path / "graph")).Tags()["tensors"]) == {"marker"}
    # Written from the host instead.
    host = tf.summary.create_file_writer(str(path / "host"))
    assert keras_gradmon.write_summaries(wrapper, host)
    host.flush()
    written = scalar_series(load_events(str(path / "host")), "grad_norm/global")
    assert written == {i: pytest.approx(n, rel=1e-6) for i, n in enumerate(norms)}


# Clipping and skipping -------------------------------------------------------


def test_clipping_is_tf_clip_by_global_norm(mode):
    variables, reference = _variables(), _variables()
    wrapper = keras_gradmon.wrap(
        V1.GradientDescentOptimizer(1.0),
        every_n_steps=1,
        clipping={"method": "global_norm", "max_norm": 1.0},
    )
    step = compile_fn(
        lambda grads: wrapper.apply_gradients(zip(grads, variables)), mode
    )
    for i in (0, 2):
        step(_grads(i))
        clipped, norm = tf.clip_by_global_norm(_grads(i), 1.0)
        for variable, grad in zip(reference, clipped):
            variable.assign_sub(grad)
        for got, want in zip(variables, reference):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
        totals = wrapper.snapshot().totals
        assert totals["clip_pre_norm"] == pytest.approx(float(norm), rel=1e-6)
        assert totals["clip_post_norm"] == pytest.approx(1.0, rel=1e-6)
        assert totals["clip_scale"] == pytest.approx(1.0 / float(norm), rel=1e-6)


@pytest.mark.parametrize(
    "mode, name",
    [
        pytest.param(mode, name, id=f"{mode}-{name}")
        for mode, name in (
            ("eager", "Momentum"),
            ("eager", "Adam"),
            ("function", "Momentum"),
            ("function", "Adam"),
            ("xla", "Adam"),  # the skip's code under XLA is the same for both
        )
    ],
)
def test_skip_nonfinite_leaves_weights_and_slots(mode, name):
    variables = _variables()
    global_step = tf.Variable(3, dtype=tf.int64)
    wrapper = keras_gradmon.wrap(FAMILY[name](), every_n_steps=1, skip_nonfinite=True)
    step = compile_fn(
        lambda grads: wrapper.apply_gradients(zip(grads, variables), global_step),
        mode,
    )
    step(_grads(0))
    before = _state(wrapper, variables)
    step([tf.constant([[np.nan, 1.0], [0.0, 0.0]]), tf.constant([np.inf, 0.0])])
    for got, want in zip(_state(wrapper, variables), before):
        np.testing.assert_array_equal(got, want)
    snapshot = wrapper.snapshot()
    assert snapshot.totals["skipped_steps"] == 1.0
    assert snapshot.totals["grad_nonfinite"] == 2.0
    assert int(global_step) == 4  # not incremented by the skipped step
    step(_grads(2))
    assert int(global_step) == 5
    assert not np.array_equal(variables[0].numpy(), before[0])


def test_sparse_gradients_are_bit_identical():
    states = []
    for wrapped in (False, True):
        table = tf.Variable(np.arange(12.0, dtype="float32").reshape(6, 2))
        optimizer = V1.AdamOptimizer(0.1)
        if wrapped:
            optimizer = keras_gradmon.wrap(optimizer, every_n_steps=1)
        for ids in ([0, 3], [3, 5, 5]):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.gather(table, ids) ** 2)
            grad = tape.gradient(loss, table)
            assert isinstance(grad, tf.IndexedSlices)
            optimizer.apply_gradients([(grad, table)])
        states.append(_state(optimizer, [table]))
    for plain, monitored in zip(*states):
        np.testing.assert_array_equal(monitored, plain)


# Checkpoints --------------------------------------------------------------------


def test_checkpoint_holds_slots_and_monitor_state(tmp_path):
    def make(seed):
        variables = _variables()
        for v in variables:
            v.assign(v + seed)
        wrapper = keras_gradmon.wrap(
            V1.AdamOptimizer(0.01),
            every_n_steps=2,
            clipping={"method": "autoclip", "percentile": 50.0, "history": 4},
        )
        return variables, wrapper

    variables, wrapper = make(0.0)
    for i in range(3):
        wrapper.apply_gradients(zip(_grads(i), variables))
    path = tf.train.Checkpoint(optimizer=wrapper, variables=variables).save(
        str(tmp_path / "ckpt")
    )
    restored_variables, restored = make(5.0)
    status = tf.train.Checkpoint(optimizer=restored, variables=restored_variables)
    status = status.restore(path)
    status.assert_existing_objects_matched()
    for optimizer, vs in ((wrapper, variables), (restored, restored_variables)):
        optimizer.apply_gradients(zip(_grads(1), vs))  # step 3: not due
    status.assert_consumed()  # slots, beta powers, the monitor's state
    for got, want in zip(
        _state(restored, restored_variables), _state(wrapper, variables)
    ):
        np.testing.assert_array_equal(got, want)
    mine, theirs = restored.snapshot(), wrapper.snapshot()
    assert mine.step == theirs.step == 2
    np.testing.assert_array_equal(mine.values, theirs.values)
    got = restored.monitor.state.step_counts.numpy()
    np.testing.assert_array_equal(got, wrapper.monitor.state.step_counts.numpy())
    for name, value in wrapper.monitor.state.clip.items():
        np.testing.assert_array_equal(
            restored.monitor.state.clip[name].numpy(), value.numpy()
        )


# Bad input ----------------------------------------------------------------------

KINDS = (
    r"a Keras 3 optimizer .*a tf_keras optimizer .*a `tf\.compat\.v1\.train\.Optimizer`"
)


class _DuckOptimizer:
    """Has the methods of an optimizer, and is none of the supported kinds."""

    def apply_gradients(self, grads_and_vars):
        return None

    def minimize(self, loss, var_list):
        return None


@pytest.mark.parametrize(
    "value, shown",
    [
        ("adam", r"\(a name: construct the optimizer first\)\. .*optimizer='adam'"),
        (None, r"optimizer=None"),
        (tf.Variable(1.0), r"optimizer=<tf\.Variable"),
        (
            tf.keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5),
            r"ExponentialDecay",
        ),
        (_DuckOptimizer(), r"_DuckOptimizer"),
    ],
    ids=["a name", "None", "a variable", "a schedule", "another kind"],
)
def test_wrap_refuses_what_is_not_a_supported_optimizer(value, shown):
    with pytest.raises(ValueError, match=rf"`optimizer` must be {KINDS}") as error:
        keras_gradmon.wrap(value)
    assert re.search(shown, str(error.value)), str(error.value)


def test_a_tf_keras_loss_scaler_is_refused():
    scaler = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
    with pytest.raises(ValueError, match="must not be a tf_keras LossScaleOptimizer"):
        keras_gradmon.wrap(scaler)


def test_the_adapter_refuses_another_kind():
    with pytest.raises(ValueError, match=rf"`inner_optimizer` must be {KINDS}"):
        V1GradientMonitorOptimizer(tf.keras.optimizers.Adam())
    with pytest.raises(ValueError, match=rf"`inner_optimizer` must be {KINDS}"):
        keras_gradmon.GradientMonitorOptimizer(_DuckOptimizer())


@pytest.mark.parametrize(
    "make",
    [
        lambda: keras_gradmon.wrap(V1.AdamOptimizer()),
        lambda: keras_gradmon.wrap(tf.keras.optimizers.Adam()),
        lambda: keras_gradmon.wrap(tf.keras.optimizers.legacy.Adam()),
    ],
    ids=["v1", "tf_keras", "tf_keras_legacy"],
)
def test_double_wrapping_is_refused(make):
    wrapper = make()
    for again in (
        lambda: keras_gradmon.wrap(wrapper),
        lambda: keras_gradmon.wrap(wrapper, name="again"),
        lambda: keras_gradmon.GradientMonitorOptimizer(wrapper),
        lambda: type(wrapper)(wrapper),
    ):
        already = r"`(inner_)?optimizer` is already monitored"
        with pytest.raises(ValueError, match=already):
            again()
