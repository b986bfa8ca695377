"""`keras-gradmon demo` and `keras-gradmon report` on real monitored runs."""

from __future__ import annotations

import re

import numpy as np
import pytest

from keras_gradmon.alerts.events import format_number
from keras_gradmon.cli import EXIT_ALERTS, EXIT_ERROR, main
from tests.reference import alert_records, load_events, scalar_series

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow


def _report(capsys, *args):
    code = main(["report", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_demo_clipped_run_finishes_finite_and_unclipped_run_explodes(demo_logs):
    clipped = scalar_series(
        load_events(str(demo_logs / "clipping" / "train")), "epoch_loss"
    )
    assert len(clipped) == 5 and all(np.isfinite(list(clipped.values())))
    assert clipped[4] < clipped[0]
    exploded = load_events(str(demo_logs / "no_clipping" / "train"))
    nonfinite = scalar_series(exploded, "grad_nonfinite/global")
    assert max(nonfinite.values()) > 0  # and the "stop" action ended it early
    assert len(scalar_series(exploded, "epoch_loss")) == 1


def test_report_numbers_equal_the_event_files(demo_logs, capsys, tmp_path):
    code, out, _ = _report(capsys, demo_logs, "--out", tmp_path)
    assert code == 0
    events = load_events(str(demo_logs / "clipping" / "train"))
    norms = np.array(list(scalar_series(events, "grad_norm/global").values()))
    steps = list(scalar_series(events, "grad_norm/global"))
    clip = np.array(list(scalar_series(events, "clip/fraction").values()))
    loss = scalar_series(events, "epoch_loss")[4]
    row = next(line for line in out.splitlines() if line.startswith("clipping/train"))
    expected = [
        format_number(loss),
        format_number(np.median(norms)),
        format_number(np.percentile(norms, 99)),
        f"{format_number(norms.max())} @ {steps[int(np.argmax(norms))]}",
        f"{clip.mean():.0%}",
    ]
    assert re.split(r"\s{2,}", row)[1:6] == expected


def test_report_lists_the_alerts_in_order_with_their_messages(demo_logs, capsys):
    _, out, _ = _report(capsys, demo_logs, "--no-plots")
    section = out.split("== no_clipping/train ==")[1]
    events = load_events(str(demo_logs / "no_clipping" / "train"))
    written = alert_records(events)
    assert any(a["tier"] == "critical" for a in written)
    listed = [line.strip() for line in section.splitlines() if line.startswith("  ")]
    messages = [a["message"] for a in sorted(written, key=lambda a: a["step"])]
    assert listed[: len(messages)] == messages
    assert "non-finite" in section.split("unhealthy layers:")[1]


def test_report_writes_png_plots_and_a_self_contained_html_page(
    demo_logs, capsys, tmp_path
):
    _report(capsys, demo_logs, "--out", tmp_path)
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == [
        "clipping_train_layers.png",
        "clipping_train_norms.png",
        "no_clipping_train_layers.png",
        "no_clipping_train_norms.png",
    ]
    for png in tmp_path.glob("*.png"):
        data = png.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4
    assert 'src="http' not in page and "<script" not in page
    assert "CRITICAL non-finite gradient" in page


def test_fail_on_exit_codes(demo_logs, capsys):
    assert _report(capsys, demo_logs, "--no-plots", "--fail-on", "critical")[0] == (
        EXIT_ALERTS
    )
    clean = demo_logs / "clipping"
    assert _report(capsys, clean, "--no-plots", "--fail-on", "warning")[0] == 0
    assert _report(capsys, clean, "--no-plots")[0] == 0


def test_fail_on_warning_but_not_critical(tmp_path, capsys):
    from keras_gradmon import ActivationMonitor
    from tests.activations import models

    monitor = ActivationMonitor(
        models.sequential(), models.probe_data(), log_dir=str(tmp_path),
        dead_fraction=0.25,
    )
    monitor.record(0)  # 3 of 8 dead, above the fixed 0.25: a warning
    monitor.flush()
    assert _report(capsys, tmp_path, "--no-plots", "--fail-on", "warning")[0] == (
        EXIT_ALERTS
    )
    code, out, _ = _report(capsys, tmp_path, "--no-plots", "--fail-on", "critical")
    assert code == 0
    assert "h1  dead units" in out
    _, out, _ = _report(capsys, tmp_path, "--no-plots", "--dead-fraction", "0.5")
    assert "dead units" not in out  # 3 of 8 is below 0.5
    code, _, err = _report(capsys, tmp_path, "--std-band", "2", "1")
    assert code == EXIT_ERROR and "Received: --std-band 2 1" in err


def test_clear_errors_for_missing_or_empty_directories(tmp_path, capsys):
    code, _, err = _report(capsys, tmp_path / "nope")
    assert code == EXIT_ERROR
    assert f"No such log directory: '{tmp_path / 'nope'}'" in err
    (tmp_path / "empty").mkdir()
    code, _, err = _report(capsys, tmp_path / "empty")
    assert code == EXIT_ERROR and "No TensorBoard event files" in err
