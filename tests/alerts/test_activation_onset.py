"""Section 3 of issue 23 on a real Keras model (TensorFlow backend): a ReLU
layer that dies is reported at the next activation summary, and nothing
before it. (The healthy runs, activations measured every step, are
`tests/alerts/test_scenarios.py`.)"""

from __future__ import annotations

import pytest

from tests.scenarios.activations import (
    collapse_after_bad_learning_rate,
    dead_relu_onset,
)


@pytest.mark.parametrize(
    ("every_n_steps", "onset", "first"),
    [
        (1, 40, [40, 41]),
        # The first summaries at or after step 40 are steps 42 and 49.
        (7, 40, [42, 49]),
    ],
)
def test_a_dead_relu_layer_alerts_at_the_next_summary(every_n_steps, onset, first):
    outcome = dead_relu_onset(steps=60, onset=onset, every_n_steps=every_n_steps)
    assert outcome.false_alarms == []  # neither monitor, before the onset
    dead = [a for a in outcome.alerts if a.rule == "dead_units"]
    # Warning at the first summary (every live unit died), critical from
    # the second (still dead), on the layer that died only.
    assert [(a.step, a.tier, a.subject) for a in dead[:2]] == [
        (first[0], "warning", "mlp/h2"),
        (first[1], "critical", "mlp/h2"),
    ]
    assert {a.subject for a in dead} == {"mlp/h2"}
    # Its std collapsed to 0 at the same summaries.
    collapse = [a for a in outcome.alerts if a.rule == "activation_collapse"]
    assert [(a.step, a.tier, a.subject, a.value) for a in collapse[:2]] == [
        (first[0], "warning", "mlp/h2", 0.0),
        (first[1], "critical", "mlp/h2", 0.0),
    ]
    assert outcome.first().step == first[0]
    assert (
        f"WARNING dead units at step {first[0]}: activation_dead_fraction of "
        "'mlp/h2' = 1 >= 0.9 (it was 0 within the last 5 summaries)."
    ) in "\n".join(outcome.lines)


def test_an_activation_collapse_after_a_bad_learning_rate_alerts_at_once():
    # SGD's learning rate 0.01 -> 50 at step 60: the gradients explode,
    # then a few steps later "h2" outputs 0 on every input.
    outcome = collapse_after_bad_learning_rate(steps=75, onset=60)
    assert outcome.false_alarms == []
    collapse = [a for a in outcome.alerts if a.rule == "activation_collapse"]
    assert collapse, outcome.lines
    first = collapse[0]
    assert (first.subject, first.value, first.tier) == ("mlp/h2", 0.0, "warning")
    assert first.step - outcome.fault_step <= 10
    # Caught at the first summary it shows: one summary earlier, "h2"'s
    # units were not all dead yet.
    dead = {a.step: a.value for a in outcome.alerts if a.rule == "dead_units"}
    assert dead.get(first.step - 1, 0.0) < 1.0
