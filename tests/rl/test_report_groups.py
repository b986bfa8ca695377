"""`keras-gradmon report --group` on three seeded runs per configuration,
written as real event files with the monitor's recorder and alert delivery."""

from __future__ import annotations

import re

import numpy as np
import pytest

from keras_gradmon.alerts import Alert, AlertEngine
from keras_gradmon.alerts.events import format_number
from keras_gradmon.cli import EXIT_ALERTS, EXIT_ERROR, main
from keras_gradmon.report.rl import BOOTSTRAP_REPS, iqm, median, stratified_bootstrap_ci
from keras_gradmon.rl.rules import default_rl_rules
from keras_gradmon.rl.tags import alert_scope, rl_tag

STEPS = range(0, 1001, 100)


def _curve(config: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + (100 if config == "ppo" else 0))
    top = 150.0 if config == "dqn" else 60.0
    return np.linspace(10, top, len(STEPS)) + rng.normal(0, 10, len(STEPS))


def _write_run(log_dir, config: str, seed: int) -> None:
    import tensorflow as tf

    from keras_gradmon.alerts.delivery import AlertDelivery
    from keras_gradmon.recorders.tensorboard import TensorBoardRecorder

    writer = tf.summary.create_file_writer(str(log_dir / f"{config}_seed{seed}"))
    recorder = TensorBoardRecorder(writer=writer)
    delivery = AlertDelivery(writer=writer, tag_scope=alert_scope())
    engine = AlertEngine(default_rl_rules())
    for step, value in zip(STEPS, _curve(config, seed)):
        numbers = {
            "episode/count": step / 10 + 1,
            "episode/return_mean": value,
            "episode/return_min": value - 20,
            "episode/return_max": value + 20,
            "policy/entropy_fraction": 0.5,
            "progress/training_intensity": 64.0,
        }
        if config == "ppo" and step % 500 == 0:  # evaluations: eval finals
            numbers["eval/return_mean"] = value + 5.0
        recorder.write_scalars({rl_tag(k): v for k, v in numbers.items()}, step)
        alerts = []
        if config == "ppo" and seed == 1 and step == 500:
            alerts = [Alert("collapse", "warning", step, 0.1, 0.2, "collect_policy",
                            metric="entropy", comparison="<")]
        delivery.deliver(step, alerts, engine)
    writer.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("seeds")
    for config in ("dqn", "ppo"):
        for seed in range(3):
            _write_run(log_dir, config, seed)
    return log_dir


def _report(capsys, *args):
    code = main(["report", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def _row(out: str, first: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith(first + " "))
    return re.split(r"\s{2,}", line.strip())


def test_groups_give_median_iqm_interval_and_range_across_seeds(runs, capsys):
    code, out, _ = _report(capsys, runs, "--group", r"(\w+)_seed\d+", "--no-plots")
    assert code == 0
    for config, source, offset in (("dqn", "collect", 0.0), ("ppo", "eval", 5.0)):
        finals = np.array([_curve(config, seed)[-1] + offset for seed in range(3)])
        ci = {
            fn: stratified_bootstrap_ci([finals], fn, BOOTSTRAP_REPS, seed=0)
            for fn in (median, iqm)
        }
        interval = lambda c: f"[{format_number(c[0])}, {format_number(c[1])}]"  # noqa: E731
        assert _row(out, config) == [
            config,
            source,
            "3",
            format_number(np.median(finals)),
            interval(ci[median]),
            format_number(finals.mean()),  # IQM of 3 seeds: their mean
            interval(ci[iqm]),
            format_number(finals.min()),
            format_number(finals.max()),
        ]
    runs_row = _row(out, "dqn_seed2 [rl]")
    assert runs_row[1] == format_number(_curve("dqn", 2)[-1])


def test_groups_in_the_plots_and_the_html(runs, capsys, tmp_path):
    _report(capsys, runs, "--group", r"(\w+)_seed\d+", "--out", tmp_path)
    assert (tmp_path / "rl_groups.png").read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.glob("*_rl.png")) == [
        f"{c}_seed{s}_rl.png" for c in ("dqn", "ppo") for s in range(3)
    ]
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Across seeds</h2>" in page
    finals = np.array([_curve("ppo", seed)[-1] + 5.0 for seed in range(3)])
    cells = f"<td>ppo</td><td>eval</td><td>3</td><td>{format_number(np.median(finals))}"
    assert cells in page
    assert page.count("data:image/png;base64,") == 7


def test_fail_on_covers_rl_alerts(runs, capsys):
    code, out, _ = _report(capsys, runs, "--no-plots", "--fail-on", "warning")
    assert code == EXIT_ALERTS
    section = out.split("== ppo_seed1 [rl] ==")[1]
    assert "WARNING entropy collapse at step 500" in section
    assert _report(capsys, runs, "--no-plots", "--fail-on", "critical")[0] == 0


def test_a_bad_group_pattern_is_an_input_error(runs, capsys):
    code, _, err = _report(capsys, runs, "--group", "(")
    assert code == EXIT_ERROR
    assert "--group must be a valid regular expression" in err
    assert "Received: --group '('" in err
