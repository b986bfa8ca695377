"""RL alerts on the console: a lasting overestimation of a real DQN agent is
one incident of a few lines, while the history, the JSON lines and the
`alerts/rl/...` flags keep every firing."""

from __future__ import annotations

import json
import logging

import pytest
from tf_agents.utils import common

from keras_gradmon.rl.monitor import RLHealthMonitor
from keras_gradmon.rl.rules import OverestimationRule, default_rl_rules
from tests.agents.rl.helpers import BATCH, chain_dqn, collect
from tests.reference import alert_records, load_events, scalar_series

STEPS = 160
PREFILL = 30
TITLE = "value/return overestimation"


def _overestimating_run(tmp_path, caplog):
    """A frozen DQN whose Q-values are 3x the true values, a summary at
    every train step, the monitor otherwise at its defaults (rules,
    `fold_steps`) but for the overestimation rule's span: 3 summaries
    alone (the default's 2,000 steps would fire from step 2,000)."""
    agent, env, buffer = chain_dqn(scale=3.0)
    rules = {
        **default_rl_rules(),
        "value_overestimation": OverestimationRule(ratio=2.0, patience=3),
    }
    monitor = RLHealthMonitor(
        agent,
        rules=rules,
        every_n_steps=1,
        log_dir=str(tmp_path / "logs"),
        jsonl_path=str(tmp_path / "alerts.jsonl"),
    )
    driver = collect(env, agent, [buffer.add_batch, monitor.observer])
    for _ in range(PREFILL):
        driver.run()
    iterator = iter(buffer.as_dataset(sample_batch_size=BATCH, num_steps=2))
    monitor.train_fn = common.function(agent.train)
    with caplog.at_level(logging.WARNING, logger="keras_gradmon"):
        for _ in range(STEPS):
            driver.run()
            monitor.train(next(iterator)[0])
        monitor.close()
    return monitor


def test_a_lasting_overestimation_logs_a_few_lines_and_keeps_every_alert(
    tmp_path, caplog
):
    monitor = _overestimating_run(tmp_path, caplog)
    over = [a for a in monitor.history if a.rule == "overestimation"]
    # episodes are complete from the prefill on: the ratio (3) is measured
    # at every summary and the rule fires from the 3rd (patience 3) on
    assert [a.step for a in over] == list(range(2, STEPS))
    assert {a.subject for a in over} == {"start_states"}
    assert all(a.value == pytest.approx(3.0, rel=1e-4) for a in over)
    logged = [
        r.getMessage()
        for r in caplog.records
        if r.name == "keras_gradmon" and TITLE in r.getMessage()
    ]
    # the first in full, one folded line after 100 steps, the closing line
    assert len(logged) <= 10
    assert logged[0] == over[0].message
    assert logged[1].startswith(
        f"WARNING {TITLE} of 'start_states' goes on: 100 more since the last "
        "line, 101 summaries, steps 2 to 102; worst value/return = 3"
    )
    assert logged[-1].startswith(
        f"WARNING {TITLE} of 'start_states' was still firing at the end: "
        f"{len(over)} summaries, steps 2 to {STEPS - 1}; worst value/return = 3"
    )
    assert len(logged) == 3
    lines = (tmp_path / "alerts.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        a.to_dict() for a in monitor.history
    ]
    events = load_events(str(tmp_path / "logs"))
    flags = scalar_series(events, "alerts/rl/value_overestimation")
    assert flags == {step: float(step >= 2) for step in range(STEPS)}
    texts = alert_records(events, "rl")
    assert [t for t in texts if t["rule"] == "overestimation"] == [
        a.to_dict() for a in over
    ]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, 2),  # default 100 steps: the first line and the closing one
        ({"fold_steps": 2}, 3),  # and a folded line at step 3 (1 + 2)
        ({"fold_steps": None}, 5),  # every alert in full
    ],
)
def test_fold_steps_reaches_the_console(caplog, options, expected):
    monitor = RLHealthMonitor(chain_dqn()[0], **options)
    with caplog.at_level(logging.WARNING, logger="keras_gradmon"):
        monitor.record_evaluation([200.0], step=0)
        for step in range(1, 6):  # the evaluation return collapsed
            monitor.record_evaluation([10.0], step=step)
        monitor.close()
    logged = [r.getMessage() for r in caplog.records if r.name == "keras_gradmon"]
    assert len(logged) == expected
    assert [a.step for a in monitor.history] == [1, 2, 3, 4, 5]
    assert logged[0] == monitor.history[0].message
