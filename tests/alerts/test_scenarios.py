"""The default alert rules on real Keras runs, statistics every step
(issue 23): silent on healthy training, each fault alerted at once.

The full-length runs are `benchmarks/bench_alerts.py`; these are shortened
to the least that still shows each claim: every healthy run goes past the
rules' 100-step warm-up and trains to convergence, its last epoch's mean
loss below the bound (the transformer 768 steps, 6 epochs; the BatchNorm
CNN 200, converged from its second epoch, step 64; the LSTM 256, from step
128), and the learning rate jumps at step 150, after the warm-up. Left to
the benchmark: the transformer's hard batches, which reach 10x the median
norm from step 1,400 on (the old growth rule fired there; the benchmark's
quick run of 1,500 steps and its full one of 3,000 cover them), and the
memory soak's MLP, whose rules meet what they must after 30,000 steps.
"""

from __future__ import annotations

import pytest

from tests.scenarios import gradients

pytestmark = pytest.mark.slow


def _quiet(outcome, converged):
    assert outcome.alerts == [], [a.message for a in outcome.alerts]
    assert outcome.lines == []
    assert outcome.final_loss < converged


def test_a_transformer_trained_to_convergence_raises_nothing():
    _quiet(gradients.transformer(steps=768), converged=0.01)


def test_a_batchnorm_cnn_trained_to_convergence_raises_nothing():
    _quiet(gradients.bn_cnn(steps=200), converged=0.1)


def test_an_lstm_trained_to_convergence_raises_nothing():
    _quiet(gradients.lstm(steps=256), converged=0.01)


def test_a_learning_rate_jump_alerts_within_5_steps():
    outcome = gradients.learning_rate_jump(steps=200, fault_step=150)
    assert outcome.false_alarms == []
    first = outcome.first()
    assert first.rule == "growth" and outcome.delay() <= 5
    assert first.message in outcome.lines  # said at once, in full


def test_a_nan_input_is_critical_at_that_very_step():
    outcome = gradients.nan_input(steps=60, fault_step=30)
    assert outcome.false_alarms == []
    first = outcome.first()
    assert (first.rule, first.tier, first.step) == ("nonfinite", "critical", 30)
    assert outcome.lines[0] == first.message


def test_a_deep_sigmoid_stack_alerts_vanishing_layers_at_the_documented_step():
    # docs/alerts.md: the gap of a 12-layer sigmoid stack is there from the
    # start; the rule's patience is 100 steps.
    outcome = gradients.sigmoid_stack(steps=130)
    assert [(a.rule, a.step) for a in outcome.alerts] == [("vanishing_layers", 100)]
    assert outcome.alerts[0].subject == "stack/sigmoid_0/kernel"  # the first
