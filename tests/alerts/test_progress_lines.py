"""Alert lines start on a line of their own while Keras's progress bar holds
the console's line, and a "stop" says that it stops training (issue 29,
section 3)."""

from __future__ import annotations

import contextlib
import io
import logging
import sys

from keras.src.utils.progbar import Progbar

from keras_gradmon.alerts.events import CRITICAL, Alert
from keras_gradmon.alerts.incidents import IncidentLog
from keras_gradmon.recorders.console import (
    ConsoleRecorder,
    LineEndingHandler,
    LineTrackingStream,
    progress_safe_logging,
)

ALERT = Alert("nonfinite", CRITICAL, 5, 291.0, 0.0, "demo_mlp/hidden_2/kernel")


def _bar_then_alert(console: io.StringIO, safe: bool) -> str:
    """Keras's progress bar at batch 1 of 56, then an alert logged, with
    standard output and the log lines both going to `console`."""
    log = logging.getLogger("keras_gradmon")
    with contextlib.redirect_stdout(console), contextlib.ExitStack() as stack:
        if safe:
            stack.enter_context(progress_safe_logging(stream=console))
        else:  # what logging does by itself: the message on standard error
            handler = LineEndingHandler(console)
            log.addHandler(handler)
            stack.callback(log.removeHandler, handler)
        Progbar(56, verbose=1, stateless_metrics=set()).update(1, [("loss", 54.2)])
        IncidentLog().log(5, [ALERT])
    return console.getvalue()


def test_without_it_the_alert_starts_inside_the_progress_bar():
    text = _bar_then_alert(io.StringIO(), safe=False)
    bar_line = text.split("\n")[0]
    assert "1/56" in bar_line and bar_line.endswith(ALERT.message)


def test_with_it_the_alert_starts_on_a_line_of_its_own():
    text = _bar_then_alert(io.StringIO(), safe=True)
    lines = text.split("\n")
    assert "1/56" in lines[0] and "loss: 54.2000" in lines[0]
    assert "CRITICAL" not in lines[0]
    assert lines[1] == ALERT.message


def test_it_restores_standard_output_and_the_logger():
    log = logging.getLogger("keras_gradmon")
    stdout, handlers, propagate = sys.stdout, list(log.handlers), log.propagate
    with progress_safe_logging() as tracked:
        assert sys.stdout is tracked and tracked.stream is stdout
        assert not log.propagate and len(log.handlers) == len(handlers) + 1
        with progress_safe_logging() as inner:  # nested: the outer one stays
            assert inner is tracked and len(log.handlers) == len(handlers) + 1
    assert sys.stdout is stdout
    assert log.handlers == handlers and log.propagate == propagate


def test_console_recorder_lines_also_start_on_their_own_line():
    console = LineTrackingStream(io.StringIO())
    console.write("\r 3/56 [===>   ]")
    ConsoleRecorder(stream=console).write_scalars({"grad_norm/global": 0.5}, step=3)
    assert console.getvalue() == "\r 3/56 [===>   ]\nstep 3: grad_norm/global=0.5\n"
    assert not console.line_open


def test_log_stop_says_that_training_stops_and_why(caplog):
    log = IncidentLog()
    with caplog.at_level(logging.WARNING, logger="keras_gradmon"):
        log.log_stop(ALERT)
    (record,) = caplog.records
    assert record.levelno == logging.CRITICAL
    assert record.getMessage() == (
        'CRITICAL stopping training: the action of critical alerts is "stop", '
        "and non-finite gradient fired at step 5 on 'demo_mlp/hidden_2/kernel'. "
        "Training ends after the current batch."
    )
    assert log.lines_logged == 1
