"""Spikes between summaries (`track_spikes`) and skipping a spiking step
(`skip_spikes`): computed in the step from the state, every step, with no
host sync; checked against NumPy float64 norms and an unwrapped run."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_gradmon import GradientMonitorOptimizer
from tests.stepping import compiled_apply, tensors

SHAPES = [(6, 5), (5,), (5, 2)]


def _grads(steps: int, spikes: dict[int, float], seed: int = 0) -> list[list]:
    rng = np.random.default_rng(seed)
    out = []
    for t in range(steps):
        scale = spikes.get(t, 1.0) * rng.uniform(0.8, 1.2)
        out.append([(scale * rng.normal(size=s)).astype("f4") for s in SHAPES])
    return out


def _norm(grads: list) -> float:
    return float(np.sqrt(sum(np.sum(np.float64(g) ** 2) for g in grads)))


def _variables(seed: int = 1) -> list:
    rng = np.random.default_rng(seed)
    return [keras.Variable(rng.normal(size=s).astype("f4")) for s in SHAPES]


def _values(optimizer) -> dict[str, float]:
    snapshot = optimizer.snapshot()
    return optimizer.monitor.tags.scalar_values(snapshot.values, snapshot.has_grad)


@pytest.mark.parametrize("clipping", [None, {"method": "global_norm", "max_norm": 3.0}])
def test_a_spike_between_summaries_shows_in_the_next_one(clipping):
    grads = _grads(25, {7: 40.0, 13: 0.01})
    variables = _variables()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.01),
        every_n_steps=10,
        track_spikes=True,
        clipping=clipping,
    )
    step = compiled_apply(optimizer, variables)
    norms = [_norm(g) for g in grads]
    for t, g in enumerate(grads):
        step(tensors(g))
        values = _values(optimizer)
        if t in (0, 10, 20):
            since = norms[max(0, t - 9) : t + 1]  # after the previous summary
            assert values["spikes/max_norm"] == pytest.approx(max(since), rel=1e-6)
            assert values["spikes/min_norm"] == pytest.approx(min(since), rel=1e-6)
            assert values["spikes/max_step"] == max(0, t - 9) + int(np.argmax(since))
    assert optimizer.snapshot().step == 20
    assert _values(optimizer)["spikes/max_step"] == 20 - 9 + int(
        np.argmax(norms[11:21])
    )


def test_spikes_at_steps_seven_and_thirteen_are_named():
    grads = _grads(21, {7: 40.0, 13: 60.0})
    variables = _variables()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.01), every_n_steps=10, track_spikes=True
    )
    seen = {}
    for t, g in enumerate(grads):
        optimizer.apply(tensors(g), variables)
        if t % 10 == 0:
            seen[t] = _values(optimizer)["spikes/max_step"]
    assert seen == {0: 0.0, 10: 7.0, 20: 13.0}


def _run(grads: list, **options) -> tuple[list, GradientMonitorOptimizer | None]:
    variables = _variables()
    inner = keras.optimizers.Adam(0.01)
    optimizer = GradientMonitorOptimizer(inner, **options) if options else inner
    step = compiled_apply(optimizer, variables)
    for g in grads:
        step(tensors(g))
    return [keras.ops.convert_to_numpy(v) for v in variables], optimizer


def test_skip_spikes_skips_the_spike_and_nothing_else():
    grads = _grads(40, {30: 50.0})
    options = {"window": 16, "min_history": 8, "z_threshold": 6.0}
    wrapped, optimizer = _run(grads, every_n_steps=1, skip_spikes=options)
    unwrapped, inner = _run(grads[:30] + grads[31:])
    for a, b in zip(wrapped, unwrapped):
        np.testing.assert_array_equal(a, b)  # bit for bit
    assert int(optimizer.iterations) == int(inner.iterations) == 39
    values = _values(optimizer)
    assert values["skipped/spikes"] == 1.0
    assert values["skipped/steps"] == 1.0


def test_skip_spikes_waits_for_its_history_and_follows_a_new_scale():
    # A spike before `min_history` norms is applied; a lasting 100x change
    # of scale is skipped for a few steps, then followed.
    grads = _grads(60, {3: 50.0, **{t: 100.0 for t in range(20, 60)}})
    options = {"window": 8, "min_history": 6, "z_threshold": 6.0}
    _, optimizer = _run(grads, every_n_steps=1, skip_spikes=options)
    skipped = _values(optimizer)["skipped/spikes"]
    assert 1 <= skipped <= 8
    assert int(optimizer.iterations) == 60 - skipped


@pytest.mark.parametrize(
    "value, message",
    [
        ({"window": 1}, r"skip_spikes\['window'\].*Received: window=1"),
        ({"z_threshold": -1}, r"z_threshold.*Received: z_threshold=-1"),
        ({"min_history": 500}, r"min_history.*\[2, 128\]"),
        ({"sigma": 3}, r"Unknown `skip_spikes` option\(s\) \['sigma'\]"),
        ("yes", r"skip_spikes.*Received: skip_spikes='yes'"),
    ],
)
def test_bad_skip_spikes_is_refused_at_construction(value, message):
    with pytest.raises(ValueError, match=message):
        GradientMonitorOptimizer(keras.optimizers.SGD(), skip_spikes=value)
