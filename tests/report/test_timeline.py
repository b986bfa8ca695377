"""The report's alert timeline: the alerts of a run grouped into incidents
(rule, subject, tier) as the console groups them, in the text and drawn
under the norm plot in the HTML."""

from __future__ import annotations

import base64
import io
import itertools
import json
import logging
import re

import numpy as np
import pytest

from keras_gradmon.alerts import CRITICAL, WARNING, Alert, IncidentLog
from keras_gradmon.cli import main
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from keras_gradmon.report.render import timeline_lines
from keras_gradmon.report.timeline import alert_timeline
from tests.doctests import assert_examples_hold

#: The real run's first incident (NaN batches at steps 10, 19, 28): tier,
#: rule, subject, first and last step, count.
FIRST_INCIDENT = ["critical", "nonfinite", "mlp/hidden/kernel", "10", "28", "3"]
CRITICAL_RGB = (0xD6, 0x27, 0x28)  # the critical tier's colour in the plots


def _alert(step, value=5.0, rule="growth", tier=WARNING, subject="global", **kw):
    return Alert(rule, tier, step, value, 1.0, subject, **kw)


def _spans(timeline):
    return [
        (
            i.first.rule,
            i.first.subject,
            i.first.tier,
            i.first.step,
            i.last.step,
            i.count,
            i.worst.value,
            i.worst.step,
        )
        for i in timeline.incidents
    ]


def test_incidents_of_hand_built_alerts_have_exact_spans_counts_and_worst():
    alerts = [
        _alert(1, 5.0),
        _alert(2, 50.0),
        _alert(3, 7.0),
        _alert(103, 6.0),  # 100 steps after its last: the same incident
        _alert(204, 9.0),  # 101 steps after: quiet for 100, a new one
        _alert(2, 20.0, tier=CRITICAL),  # an escalation: its own incident
        _alert(3, 1e-6, rule="vanishing", comparison="<"),
        _alert(4, 1e-8, rule="vanishing", comparison="<"),  # lower is worse
        _alert(5, 1e-7, rule="vanishing", comparison="<"),
        _alert(4, float("inf"), rule="nonfinite", subject="dense/kernel"),
    ]
    records = [a.to_dict() for a in alerts] + [{"tier": "warning", "step": 9}]
    timeline = alert_timeline(records)
    assert _spans(timeline) == [
        ("growth", "global", WARNING, 1, 103, 4, 50.0, 2),
        ("growth", "global", CRITICAL, 2, 2, 1, 20.0, 2),
        ("vanishing", "global", WARNING, 3, 5, 3, 1e-8, 4),
        ("nonfinite", "dense/kernel", WARNING, 4, 4, 1, float("inf"), 4),
        ("growth", "global", WARNING, 204, 204, 1, 9.0, 204),
    ]
    assert (timeline.alerts, timeline.unreadable) == (10, 1)
    assert timeline.caption == (
        "5 incident(s) of 10 alert(s); an incident ends after 100 quiet steps; "
        "1 unreadable alert record(s) left out"
    )


def test_the_timeline_ends_incidents_where_the_console_does(caplog):
    """Alerts on and off over 700 steps, summaries at every step: each
    incident the console closes ("N summaries, steps A to B") is one of the
    timeline's, and the timeline has no other repeated one."""
    rng = np.random.default_rng(0)
    on = {
        (rule, step)
        for rule, rate in (("growth", 0.02), ("spike", 0.3))
        for step in range(700)
        if rng.random() < rate
    }
    alerts = [
        _alert(step, float(step % 7), rule=rule)
        for step in range(700)
        for rule in ("growth", "spike")
        if (rule, step) in on
    ]
    log = IncidentLog(fold_steps=50)
    with caplog.at_level(logging.WARNING, logger="keras_gradmon"):
        for step in range(700):
            log.log(step, [a for a in alerts if a.step == step])
        log.finish()
    closed = sorted(
        (rule, int(count), int(first), int(last))
        for rule, count, first, last in re.findall(
            r"gradient (\w+) of 'global' (?:ended|was still firing at the end): "
            r"(\d+) summaries, steps (\d+) to (\d+)",
            caplog.text,
        )
    )
    timeline = alert_timeline([a.to_dict() for a in alerts], fold_steps=50)
    repeated = sorted(
        (i.first.rule, i.count, i.first.step, i.last.step)
        for i in timeline.incidents
        if i.count > 1
    )
    assert len(closed) > 5 and repeated == closed
    assert sum(i.count for i in timeline.incidents) == len(alerts)


def test_the_text_shows_at_most_ten_incidents_and_counts_the_others():
    alerts = [_alert(step, subject=f"layer_{step}") for step in range(15)]
    lines = timeline_lines(alert_timeline([a.to_dict() for a in alerts]))
    assert lines[0].startswith("alert timeline (15 incident(s) of 15 alert(s)")
    assert len(lines) == 1 + 1 + 10 + 1  # title, header, 10 incidents, more
    assert lines[-1] == "  ... 5 more incident(s) (see the HTML)"
    assert lines[-2].split() == [
        "warning",
        "growth",
        "layer_9",
        "9",
        "9",
        "1",
        "grad_norm",
        "=",
        "5",
        "@",
        "9",
    ]


@pytest.mark.parametrize(
    "module",
    [
        "keras_gradmon.report.timeline",
        "keras_gradmon.report.render",
        "keras_gradmon.report.plots",
    ],
)
def test_docstring_examples_hold(module):
    assert_examples_hold(module)


def test_the_plot_draws_twelve_lanes_and_counts_the_others():
    from keras_gradmon.report.plots import (
        MAX_LANES,
        draw_timeline,
        pyplot,
        timeline_lanes,
    )

    alerts = [_alert(s, subject=f"layer_{s // 5 % 15}") for s in range(0, 300, 5)]
    timeline = alert_timeline([a.to_dict() for a in alerts])
    lanes = timeline_lanes(timeline)
    assert len(lanes) == 15 and all(len(i) == 1 for i in lanes.values())
    assert [i.count for (i,) in lanes.values()] == [4] * 15
    figure, axes = pyplot().subplots()
    draw_timeline(axes, timeline, lanes)
    labels = [label.get_text() for label in axes.get_yticklabels()]
    assert labels == [f"growth: layer_{i}" for i in range(MAX_LANES)]
    assert axes.get_title().endswith("; 3 more lane(s) in the table")
    bars = [bar.get_paths()[0].get_extents() for bar in axes.collections]
    # Lane i: steps 5 * i to 5 * i + 225 (every 75 steps, not 100 quiet).
    assert [(b.x0, b.x1) for b in bars] == [(5 * i, 5 * i + 225) for i in range(12)]
    pyplot().close(figure)


def _timeline_rows(out, title):
    """The split rows under the timeline's header in section `title`."""
    section = out.split(f"== {title} ==\n")[1].split("\n== ")[0]
    lines = section.split("alert timeline (")[1].splitlines()
    assert lines[1].split() == [
        "tier",
        "rule",
        "subject",
        "first",
        "last",
        "count",
        "worst",
    ]
    rows = itertools.takewhile(lambda line: line.startswith("  "), lines[2:])
    return [row.split() for row in rows]


def test_alerts_of_every_monitor_get_a_timeline(tmp_path, capsys):
    """Gradient and activation alerts (`alert_log/all`), a scoped optimizer's
    (`alert_log/actor/all`) and an RL agent's (`alert_log/rl/all`)."""
    written = {
        "alert_log/all": [
            _alert(
                5,
                0.1,
                rule="band",
                subject="mlp/hidden",
                metric="activation_std",
                comparison="<",
            ),
            _alert(
                6,
                0.05,
                rule="band",
                subject="mlp/hidden",
                metric="activation_std",
                comparison="<",
            ),
            _alert(6, 40.0, rule="spike"),
        ],
        "alert_log/actor/all": [_alert(7, 9.0, rule="threshold", tier=CRITICAL)],
        "alert_log/rl/all": [
            _alert(
                step, 0.01, rule="entropy_collapse", subject="policy", metric="entropy"
            )
            for step in (5, 6, 7)
        ],
    }
    recorder = TensorBoardRecorder(str(tmp_path / "dqn"))
    for tag, alerts in written.items():
        for alert in alerts:
            recorder.write_text(tag, [json.dumps(alert.to_dict())], alert.step)
    recorder.close()
    assert main(["report", str(tmp_path), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert _timeline_rows(out, "dqn") == [
        [
            "warning",
            "band",
            "mlp/hidden",
            "5",
            "6",
            "2",
            "activation_std",
            "=",
            "0.05",
            "@",
            "6",
        ],
        ["warning", "spike", "global", "6", "6", "1", "grad_norm", "=", "40", "@", "6"],
    ]
    assert _timeline_rows(out, "dqn [actor]") == [
        [
            "critical",
            "threshold",
            "global",
            "7",
            "7",
            "1",
            "grad_norm",
            "=",
            "9",
            "@",
            "7",
        ],
    ]
    assert _timeline_rows(out, "dqn [rl]") == [
        [
            "warning",
            "entropy_collapse",
            "policy",
            "5",
            "7",
            "3",
            "entropy",
            "=",
            "0.01",
            "@",
            "5",
        ],
    ]


# A real run: NaN inputs at known batches make the non-finite rule fire.
NAN_BATCHES = (10, 20, 30, 140)
BATCHES = 150


def _fit_with_nan_batches(log_dir):
    """A small MLP, monitored at every step with `skip_nonfinite` (a NaN batch
    leaves the weights and the step counter alone: the next batch runs at
    the same step), the default alert rules; NaN inputs at `NAN_BATCHES`."""
    import keras

    from keras_gradmon import (
        GradientAlertCallback,
        GradientMonitorOptimizer,
        GradientSummaryCallback,
    )
    from tests.helpers import LOSS, data, mlp

    x, y = data(n=BATCHES * 8)
    for batch in NAN_BATCHES:
        x[batch * 8 : (batch + 1) * 8] = np.nan
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.05),
        every_n_steps=1,
        histogram_every_n_steps=None,
        skip_nonfinite=True,
    )
    model.compile(optimizer, LOSS)
    alerts = GradientAlertCallback(log_dir=log_dir)
    model.fit(
        x,
        y,
        batch_size=8,
        shuffle=False,
        verbose=0,
        callbacks=[GradientSummaryCallback(log_dir), alerts],
    )
    return alerts.alerts


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("nan_run") / "train"
    return log_dir, _fit_with_nan_batches(str(log_dir))


def test_a_real_runs_timeline_in_the_text(nan_run, capsys, tmp_path):
    log_dir, alerts = nan_run
    # Batch b runs at step b minus the NaN batches before it (skipped).
    steps = [batch - i for i, batch in enumerate(NAN_BATCHES)]
    assert steps == [10, 19, 28, 137]
    assert [(a.rule, a.step) for a in alerts] == [("nonfinite", s) for s in steps]
    assert main(["report", str(log_dir), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (
        "alert timeline (2 incident(s) of 4 alert(s); an incident ends after "
        "100 quiet steps):"
    ) in out
    # 137 is 109 steps after 28: quiet for 100 steps, a new incident.
    count = _nonfinite_count(alerts)
    assert _timeline_rows(out, "train") == [
        [*FIRST_INCIDENT, "grad_nonfinite", "=", count, "@", "10"],
        [
            *FIRST_INCIDENT[:3],
            "137",
            "137",
            "1",
            "grad_nonfinite",
            "=",
            count,
            "@",
            "137",
        ],
    ]


def _nonfinite_count(alerts) -> str:
    """The NaN gradient elements of each NaN batch, as the alerts measured
    them: the first kernel's 8*16 on any CPU (its gradient is the NaN input
    times the backpropagated error); up to all 195 of the MLP's (8*16 + 16 +
    16*3 + 3) where the CPU's max(NaN, 0) gives NaN, so ReLU passes NaN on.
    The same count at every NaN batch (the weights are not updated by them)."""
    counts = {a.value for a in alerts}
    assert len(counts) == 1
    [count] = counts
    assert count in (128, 195)
    return f"{count:.0f}"


def _embedded_pngs(page):
    from matplotlib import image

    found = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)">', page)
    return {
        alt: image.imread(io.BytesIO(base64.b64decode(data))) for alt, data in found
    }


def test_a_real_runs_timeline_is_drawn_under_the_norm_plot(nan_run, capsys, tmp_path):
    log_dir, alerts = nan_run
    assert main(["report", str(log_dir), "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    page = (tmp_path / "report.html").read_text()
    assert "<h3>Alert timeline</h3>" in page
    cells = re.findall(r"<td>([^<]*)</td>", page.split("<h3>Alert timeline</h3>")[1])
    count = _nonfinite_count(alerts)
    assert cells[:7] == [*FIRST_INCIDENT, f"grad_nonfinite = {count} @ 10"]
    pixels = _embedded_pngs(page)["train_norms.png"]
    # 4 inches of norms, 0.8 + 0.28 per lane (one lane) of timeline, 100 dpi.
    assert pixels.shape[:2] == (508, 800)
    red = np.all(np.abs(pixels[..., :3] * 255 - CRITICAL_RGB) < 1, axis=-1)
    rows = np.nonzero(red.any(axis=1))[0]
    # Solid critical bars only in the timeline's one lane, in the lowest
    # quarter (the alert lines on the norm plot are dashed and translucent).
    assert rows.size > 20 and rows.min() > 0.75 * 508
    assert rows.max() - rows.min() + 1 == rows.size
    # Two bars on one lane: steps 10 to 28, and 137 (a bar of the least width).
    columns = np.nonzero(red[rows].any(axis=0))[0]
    runs = np.split(columns, np.nonzero(np.diff(columns) > 1)[0] + 1)
    assert len(runs) == 2 and runs[0].size > 3 * runs[1].size
