"""Section 3 of issue 23 on a real Keras model (TensorFlow backend): a ReLU
layer that dies is reported at the next activation summary, and nothing
before it. (The healthy runs, activations measured every step, are
`tests/alerts/test_scenarios.py`.)"""

from __future__ import annotations

import pytest

from tests.scenarios.activations import dead_relu_onset


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
    dead = [a for a in outcome.alerts if a.metric == "activation_dead_fraction"]
    # Warning at the first summary (100% dead), critical from the second
    # (more than 90% for 2 summaries), on the layer that died only.
    assert [(a.step, a.tier, a.subject) for a in dead[:2]] == [
        (first[0], "warning", "h2"),
        (first[1], "critical", "h2"),
    ]
    assert {a.subject for a in dead} == {"h2"}
    assert outcome.first() == dead[0]
    assert outcome.lines[0].startswith(
        f"WARNING activation_dead_fraction threshold at step {first[0]}: "
        "activation_dead_fraction of 'h2' = 1 > 0.25"
    )
