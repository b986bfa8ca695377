"""Tests of `IncidentLog`: alerts grouped into incidents on the console."""

from __future__ import annotations

import logging

import pytest

from keras_gradmon.alerts import CRITICAL, WARNING, Alert, IncidentLog

# A value per step: 5, with a low at step 40 and a high at step 170.
VALUES = {40: 0.5, 170: 500.0}


def make(step, tier=WARNING, subject="global", comparison=">", rule="growth"):
    value = VALUES.get(step, 5.0)
    return Alert(rule, tier, step, value, 1.0, subject, comparison=comparison)


@pytest.fixture
def lines(caplog):
    caplog.set_level(logging.WARNING, logger="keras_gradmon")
    return lambda: [(r.levelno, r.getMessage()) for r in caplog.records]


def feed(log, steps, alerts_at):
    for step in steps:
        log.log(step, alerts_at(step))


@pytest.mark.parametrize(
    "comparison, worst_at_101, worst",
    [(">", "5 at step 1", "500 at step 170"), ("<", "0.5 at step 40", None)],
)
def test_repeats_fold_into_a_line_and_the_end_into_one(
    lines, comparison, worst_at_101, worst
):
    log = IncidentLog(fold_steps=100)
    alerts = [make(s, comparison=comparison) for s in range(1, 251)]
    feed(log, range(1, 251), lambda s: [alerts[s - 1]])
    feed(log, range(251, 350), lambda s: [])
    assert len(lines()) == 2  # quiet for 99 steps: not over yet
    log.log(350, [])
    worst = worst or worst_at_101
    head = "WARNING gradient growth of 'global'"
    assert lines() == [
        (logging.WARNING, alerts[0].message),
        (
            logging.WARNING,
            f"{head} goes on: 100 more since the last line, 101 summaries, "
            f"steps 1 to 101; worst grad_norm = {worst_at_101}.",
        ),
        (
            logging.WARNING,
            f"{head} ended: 250 summaries, steps 1 to 250; worst grad_norm = "
            f"{worst}.",
        ),
    ]
    assert log.open == {} and log.lines_logged == 3


def test_folded_lines_come_ever_more_rarely_and_finish_closes(lines):
    log = IncidentLog(fold_steps=100)
    feed(log, range(1, 1001), lambda s: [make(s, tier=CRITICAL)])
    log.finish()
    logged = lines()
    assert {level for level, _ in logged} == {logging.CRITICAL}
    folds = [text for _, text in logged if " goes on: " in text]
    # Lines after 100, then 200 and 400 more steps.
    assert [text.split(", ")[1] for text in folds] == [
        "101 summaries",
        "301 summaries",
        "701 summaries",
    ]
    assert [text.split(": ")[1].split(" more")[0] for text in folds] == [
        "100",
        "200",
        "400",
    ]
    assert logged[-1][1] == (
        "CRITICAL gradient growth of 'global' was still firing at the end: "
        "1000 summaries, steps 1 to 1000; worst grad_norm = 500 at step 170."
    )
    assert len(logged) == 5 and log.open == {}


def test_escalation_and_a_new_subject_are_logged_at_once(lines):
    log = IncidentLog()
    log.log(1, [make(1)])
    news = [make(2, tier=CRITICAL), make(2, subject="dense"), make(2, rule="spike")]
    log.log(2, [make(2), *news])
    assert [text for _, text in lines()] == [make(1).message] + [
        a.message for a in news
    ]
    assert len(log.open) == 4


def test_an_incident_that_never_repeated_ends_silently(lines):
    log = IncidentLog(fold_steps=10)
    log.log(1, [make(1)])
    log.log(11, [])
    log.log(12, [make(12)])  # a new incident: in full again
    log.finish()
    assert [text for _, text in lines()] == [make(1).message, make(12).message]


def test_a_restarted_run_ends_the_old_incidents(lines):
    log = IncidentLog()
    feed(log, range(5, 8), lambda s: [make(s)])
    log.log(1, [make(1)])
    assert [text.split(" ended: ")[-1] for _, text in lines()] == [
        make(5).message,
        "3 summaries, steps 5 to 7; worst grad_norm = 5 at step 5.",
        make(1).message,
    ]


def test_without_folding_every_alert_is_logged_in_full(lines):
    log = IncidentLog(fold_steps=None)
    alerts = [make(s) for s in range(1, 301)]
    feed(log, range(1, 301), lambda s: [alerts[s - 1]])
    log.finish()
    assert [text for _, text in lines()] == [a.message for a in alerts]


@pytest.mark.parametrize("fold_steps", [0, -1, 2.5, "100", True])
def test_fold_steps_is_a_positive_integer_or_none(fold_steps):
    with pytest.raises(ValueError, match=r"^`fold_steps` must be a positive"):
        IncidentLog(fold_steps=fold_steps)


def test_one_rule_on_many_layers_at_once_is_one_line(lines):
    # 40 layers fire together: one line names the first 3 and a count;
    # their repeats fold into one line (at step 10; the next would be at
    # 30), and so does their end (the last alert at step 25). The record
    # (each incident) keeps every layer.
    log = IncidentLog(fold_steps=10)
    layers = [f"re_lu_{i}" for i in range(40)]

    def alerts_at(step):
        if step > 25:
            return []
        return [
            Alert("dead_units", WARNING, step, 1.0, 0.9, name, metric="dead")
            for name in layers
        ]

    feed(log, range(0, 45), alerts_at)
    logged = [message for _, message in lines()]
    assert logged == [
        "WARNING dead units at step 0 on 40 subjects: 're_lu_0' (1 > 0.9), "
        "'re_lu_1' (1 > 0.9), 're_lu_2' (1 > 0.9) and 37 more; worst "
        "'re_lu_0' = 1.",
        "WARNING dead units goes on at step 10 for 40 subjects: 're_lu_0' "
        "(1 > 0.9), 're_lu_1' (1 > 0.9), 're_lu_2' (1 > 0.9) and 37 more; "
        "worst 're_lu_0' = 1.",
        "WARNING dead units ended at step 25 for 40 subjects: 're_lu_0' "
        "(1 > 0.9), "
        "'re_lu_1' (1 > 0.9), 're_lu_2' (1 > 0.9) and 37 more; worst "
        "'re_lu_0' = 1.",
    ]
    assert log.lines_logged == 3


def test_a_lone_layer_keeps_its_own_line(lines):
    log = IncidentLog()
    log.log(3, [make(3, subject="h1"), make(3, subject="h2", rule="spike")])
    assert [message for _, message in lines()] == [
        make(3, subject="h1").message,
        make(3, subject="h2", rule="spike").message,
    ]


def test_without_folding_many_layers_are_each_logged_in_full(lines):
    log = IncidentLog(fold_steps=None)
    alerts = [make(3, subject=f"h{i}") for i in range(4)]
    log.log(3, alerts)
    assert [message for _, message in lines()] == [a.message for a in alerts]
