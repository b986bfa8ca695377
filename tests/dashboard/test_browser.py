"""The dashboard end to end: TensorBoard on a free port with the plugin, a
real chromium through Playwright. Screenshots of a failure are kept under
the test's tmp path (printed in the failure)."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.dashboard.conftest import HOSTILE, STEPS
from tests.tensorboard_process import serve, stop

CHROMIUM = "/usr/bin/chromium"
DEADLINE_S = 90
#: TensorBoard with the plugin: through the installed entry point (as
#: users get it), or named here where the installed metadata lacks it.
SERVE = (
    "import sys\n"
    "from importlib.metadata import entry_points\n"
    "from tensorboard import default, program\n"
    "from keras_gradmon.dashboard.plugin import GradmonLoader\n"
    "declared = entry_points(group='tensorboard_plugins', name='keras_gradmon')\n"
    "extra = [] if declared else [GradmonLoader]\n"
    "board = program.TensorBoard(plugins=default.get_plugins() + extra)\n"
    "board.configure(argv=['', '--logdir', sys.argv[1], '--host', '127.0.0.1',\n"
    "                      '--port', '0', '--load_fast', sys.argv[2]])\n"
    "board.main()\n"
)


def _serve(log_dir, load_fast: str):
    """`(process, port)` of TensorBoard serving `log_dir`."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
    }
    return serve([sys.executable, "-c", SERVE, str(log_dir), load_fast], env)


def _get(port: int, route: str) -> dict:
    url = f"http://127.0.0.1:{port}/data/plugin/keras_gradmon/{route}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _heatmap_when_loaded(port: int) -> dict:
    """The run's heatmap once TensorBoard has read all its steps."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            heat = _get(port, "heatmap?run=fit&metric=grad_norm")
            if len(heat["steps"]) >= STEPS:
                return heat
        except (urllib.error.URLError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            pytest.fail("TensorBoard did not serve the run's steps in time")
        time.sleep(0.3)


@pytest.mark.parametrize("load_fast", ["false", "auto"])
def test_every_step_is_kept_on_both_data_paths(fit_logs, load_fast):
    """More than TensorBoard's 10 samples of an unknown plugin: the loader's
    sampling hint, on the Python multiplexer and the Rust data server."""
    process, port = _serve(fit_logs[0], load_fast)
    try:
        heat = _heatmap_when_loaded(port)
        assert heat["steps"] == list(range(STEPS)) and heat["samples"] == 1000
        health = _get(port, "health?run=fit")
        assert (
            sum(i["count"] for r in health["reports"] for i in r["incidents"])
            == (fit_logs[1])
        )  # every alert record (20 steps of keras_gradmon/alerts) read
    finally:
        stop(process)


@pytest.fixture
def board(fit_logs):
    process, port = _serve(fit_logs[0], "auto")
    try:
        _heatmap_when_loaded(port)
        yield port
    finally:
        stop(process)


def _playwright():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (the dev extra)")
    return sync_playwright


def test_the_dashboard_in_a_browser(board, tmp_path):
    sync_playwright = _playwright()
    shots = tmp_path / "screenshots"
    problems, dialogs = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
        page.on(
            "console",
            lambda m: (
                problems.append(f"console: {m.text}") if m.type == "error" else None
            ),
        )
        try:
            page.goto(f"http://127.0.0.1:{board}/#keras_gradmon")
            _check_page(page)
        except Exception as error:
            shots.mkdir(exist_ok=True)
            page.screenshot(path=str(shots / "page.png"), full_page=True)
            raise AssertionError(f"{error}\n(screenshots in {shots})") from error
        finally:
            browser.close()
    assert dialogs == [], "a run name ran as script"
    assert problems == [], problems


#: `[width, height, distinct colours]` of a canvas.
COLOURS = """(canvas) => {
    const d = canvas.getContext("2d")
        .getImageData(0, 0, canvas.width, canvas.height).data;
    const seen = new Set();
    for (let i = 0; i < d.length; i += 4) seen.add(d.slice(i, i + 4).join());
    return [canvas.width, canvas.height, seen.size];
}"""


def _check_page(page) -> None:
    frame = page.frame_locator("iframe")
    runs = frame.locator(".run-choice")
    runs.first.wait_for(timeout=60_000)
    assert sorted(runs.all_text_contents()) == sorted(["fit", HOSTILE])
    names = frame.locator("h3.run-name")
    frame.locator(".heatmap-canvas").nth(1).wait_for(timeout=60_000)
    assert sorted(names.all_text_contents()) == sorted(["fit", HOSTILE])
    assert frame.locator("img").count() == 0  # the name is text, not markup
    section = frame.locator("section.run", has=frame.locator("h3", has_text="fit"))
    fit = section.filter(has_not_text="<img").first
    labels = fit.locator(".row-label")
    assert labels.all_text_contents() == [
        "mlp/hidden/kernel",
        "mlp/hidden/bias",
        "mlp/head/kernel",
        "mlp/head/bias",
    ]
    painted = fit.locator(".heatmap-canvas").evaluate(COLOURS)
    width, height, colours = painted
    assert height == 4 * 14 and width % STEPS == 0 and colours > 10, painted
    assert "critical" in fit.locator(".badge").text_content()
    assert fit.locator("table.incidents tr").count() > 1
    assert "threshold" in fit.locator("table.incidents").text_content()
    labels.first.click()
    detail = fit.locator(".detail")
    detail.locator(".chart-svg path.line").first.wait_for(timeout=30_000)
    text = detail.text_content()
    assert "Layer detail: mlp/hidden/kernel" in text
    assert "gradient histogram over time" in text and "activation std" in text
    assert detail.locator(".histogram-canvas").count() == 1


def _chart_logs(log_dir) -> None:
    """Run `vanish` (a kernel's norm falling to 0, its gradient histogram
    exploding at the last step) and run `big` (norms near 1e3)."""
    import numpy as np
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.histogram import summary_v2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from tests.report.writers import write_simple_values

    kernel = {0: 1e-3, 1: 1e-5, 2: 0.0, 3: 0.0}
    write_simple_values(
        str(log_dir / "vanish"),
        {"grad_norm/global": kernel, "grad_norm/dense/kernel": kernel},
    )
    writer = EventFileWriter(str(log_dir / "vanish"))
    for step in range(12):
        scale = 1e6 if step == 11 else 1.0
        values = np.linspace(-scale, scale, 50)
        summary = summary_v2.histogram_pb("grad_hist/dense/kernel", values, 10)
        writer.add_event(event_pb2.Event(step=step, summary=summary))
    writer.close()
    write_simple_values(
        str(log_dir / "big"),
        {
            "grad_norm/global": {0: 1e3, 1: 2e3},
            "grad_norm/dense/kernel": {0: 1e3, 1: 2e3},
        },
    )


def test_charts_say_zeros_outliers_and_one_scale(tmp_path):
    """A vanishing kernel's zeros on the log axis' floor, said; a histogram
    whose last step explodes keeps the others readable, said; the two runs
    share one colour scale, its ends in both legends."""
    sync_playwright = _playwright()
    _chart_logs(tmp_path)
    process, port = _serve(tmp_path, "false")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/#keras_gradmon")
            frame = page.frame_locator("iframe")
            frame.locator(".heatmap-canvas").nth(1).wait_for(timeout=60_000)
            legends = frame.locator(".legend").all_text_contents()
            assert len(legends) == 2 and legends[0] == legends[1], legends
            assert "1.000e-5" in legends[0] and "2000" in legends[0]
            assert "one scale for the 2 runs shown" in legends[0]
            vanish = frame.locator(
                "section.run", has=frame.locator("h3", has_text="vanish")
            )
            vanish.locator(".row-label", has_text="dense/kernel").click()
            detail = vanish.locator(".detail")
            detail.locator(".chart-svg path.line").first.wait_for(timeout=30_000)
            assert "2 value(s) of 0 (drawn at the axis floor, marked)" in (
                detail.locator(".zeros").text_content()
            )
            assert detail.locator(".chart-svg rect.zero").count() == 2
            beyond = detail.locator(".beyond").text_content()
            assert beyond.startswith("1 step(s) reach beyond the axis"), beyond
            assert "value axis -1 to 1 " in detail.text_content()
            browser.close()
    finally:
        stop(process)
