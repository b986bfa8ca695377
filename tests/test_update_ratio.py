"""The update/weight ratio (`update_ratio/...`): ||w_after - w_before|| /
||w_before|| of the update the inner optimizer applied, per variable, group
and globally, against NumPy float64 references of SGD, Adam and AdamW
steps; recorded on due steps only, and in every adapter."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_gradmon import GradientMonitorOptimizer
from tests.stepping import compiled_apply, tensors
from tests.update_reference import OPTIMIZERS, ratios, reference_steps

GROUPS = {"ab": [0, 1]}


def _problem(seed: int = 0) -> tuple[list, list[list]]:
    rng = np.random.default_rng(seed)
    weights = [
        rng.normal(size=(3, 4)).astype("f4"),
        rng.normal(size=(4,)).astype("f4"),
        np.zeros((2, 2), "f4"),  # weight norm 0: no per-variable ratio
    ]
    grads = [[rng.normal(size=w.shape).astype("f4") for w in weights] for _ in range(4)]
    return weights, grads


def _recorded(optimizer) -> tuple[int, dict]:
    snapshot = optimizer.snapshot()
    tags = optimizer.monitor.tags
    values = tags.scalar_values(snapshot.values, snapshot.has_grad)
    values |= tags.table.table(snapshot.values).scalars()  # the per-variable ones
    found = {k.split("/", 1)[1]: v for k, v in values.items() if "update_ratio" in k}
    return snapshot.step, found


def _expected(before: list, after: list) -> dict:
    expected = ratios(before, after, GROUPS)
    names = {0: "a", 1: "b", 2: "c"}
    return {names.get(k, k): v for k, v in expected.items()}


# With weight statistics the ratios divide by the weight norms the step's
# summary holds; without, they take the weights' norms themselves.
CASES = [(*case, True) for case in OPTIMIZERS] + [(*OPTIMIZERS[1], False)]


@pytest.mark.parametrize(
    "name, kind, kwargs, weight_statistics", CASES, ids=lambda x: str(x)[:5]
)
def test_ratio_matches_numpy_steps_on_due_steps_only(
    name, kind, kwargs, weight_statistics
):
    weights, grads = _problem()
    variables = [keras.Variable(w, name=n) for w, n in zip(weights, "abc")]
    inner = getattr(keras.optimizers, kind)(**kwargs)
    optimizer = GradientMonitorOptimizer(
        inner, every_n_steps=2, groups={"ab": "^[ab]$"}, histogram_every_n_steps=None,
        weight_statistics=weight_statistics,
    )
    step = compiled_apply(optimizer, variables)
    history = reference_steps(name, weights, grads)
    for t, g in enumerate(grads):
        before = [keras.ops.convert_to_numpy(v) for v in variables]
        step(tensors(g))
        after = [keras.ops.convert_to_numpy(v) for v in variables]
        # The weights take the NumPy optimizer's step...
        for value, reference in zip(after, history[t]):
            np.testing.assert_allclose(value, reference, rtol=1e-5, atol=1e-6)
        recorded_step, found = _recorded(optimizer)
        assert recorded_step == t - t % 2  # the latest due step
        if t % 2:
            continue  # not due: the due step's ratios stay
        # ...and the ratios are those of the float32 weights it moved.
        expected = _expected(before, after)
        assert sorted(found) == sorted(map(str, expected))
        for subject, value in expected.items():
            assert found[subject] == pytest.approx(value, rel=1e-5), subject
        previous = weights if t == 0 else history[t - 1]
        in_float64 = _expected(previous, history[t])
        for subject, value in in_float64.items():
            assert found[subject] == pytest.approx(value, rel=1e-4), subject


def test_skipped_step_records_a_ratio_of_zero():
    weights, grads = _problem(1)
    variables = [keras.Variable(w, name=n) for w, n in zip(weights, "abc")]
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1), every_n_steps=1, skip_nonfinite=True
    )
    bad = [np.full_like(grads[0][0], np.nan), *grads[0][1:]]
    optimizer.apply(tensors(bad), variables)
    _, found = _recorded(optimizer)
    assert found == {"a": 0.0, "b": 0.0, "global": 0.0}  # nothing moved
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(variables[0]), weights[0])


def test_many_variables_take_the_batched_norms():
    # Past 32 small variables beside the large ones, their norms are one
    # batched program (keras_gradmon.core.signals._norms): the same ratios.
    from keras_gradmon.core.signals import update_ratios

    rng = np.random.default_rng(4)
    old = [rng.normal(size=(64, 64)).astype("f4")]
    old += [rng.normal(size=(3, 1 + k % 5)).astype("f4") for k in range(40)]
    old[7][0, 0] = np.nan  # not finite: NaN, as a variable reduced alone
    new = [w - 1e-3 * rng.normal(size=w.shape).astype("f4") for w in old]
    new[9][1, 0] = np.inf
    rows = len(old)
    got = update_ratios(dict(enumerate(old)), dict(enumerate(new)), rows, [])
    got = np.asarray(got)
    for i, (a, b) in enumerate(zip(old, new)):
        a, b = np.float64(a), np.float64(b)
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            assert np.isnan(got[i]), i
            continue
        expected = np.linalg.norm(b - a) / np.linalg.norm(a)
        assert got[i] == pytest.approx(expected, rel=1e-5), i
    assert np.isnan(got[rows])  # the global ratio: a NaN part makes it NaN
