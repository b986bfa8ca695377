"""The DQN CartPole example raises no alert at every monitor's defaults
(the return-collapse rule judging progress beyond a random policy's return,
as the example sets it), gradient statistics and activations every step
(issue 23, section 2; shortened to 300 steps: with the rule's default
baseline of 0 it fired there on the untrained policy's noise, 9.4 against a
best of 20; `benchmarks/bench_alerts.py` runs the example's 3,000 steps)."""

from __future__ import annotations

import pytest

from tests.scenarios import dqn

pytestmark = [pytest.mark.agents, pytest.mark.slow]


def test_the_dqn_cartpole_example_raises_nothing(tmp_path):
    outcome = dqn.cartpole(iterations=300, log_dir=str(tmp_path), summary_every=100)
    assert outcome.alerts == [], [a.message for a in outcome.alerts]
    assert outcome.lines == []
