"""The report's lines for issue 21's signals, from real event files holding
their tags: per run, and across seeds with --group (text and HTML)."""

from __future__ import annotations

import numpy as np
import pytest

from keras_gradmon.cli import main
from keras_gradmon.formatting import format_number
from keras_gradmon.report.analysis import analyze_run
from keras_gradmon.report.events import load_runs
from tests.report.writers import write_simple_values

STEPS = list(range(0, 1000, 100))  # summaries at 0, 100, ..., 900


def _series(values, steps=STEPS):
    return {step: float(v) for step, v in zip(steps, values)}


def _signals(seed: int, scope: str | None = None) -> dict[str, dict[int, float]]:
    """A run's tags: norms, update ratios (global, group "dense", one
    variable), spikes between summaries, skips, noise scale, clipping."""
    rng = np.random.default_rng(seed)
    s = f"{scope}/" if scope else ""
    ratio = 1e-3 * rng.lognormal(0.0, 0.2, size=len(STEPS))
    maxima = rng.lognormal(0.0, 0.1, size=len(STEPS))
    maxima[4] = 40.0 + seed  # the summary of step 400 saw a spike
    return {
        f"grad_norm/{s}global": _series(np.ones(len(STEPS))),
        f"grad_norm/{s}dense": _series(np.ones(len(STEPS))),
        f"grad_norm/{s}dense/kernel": _series(np.ones(len(STEPS))),
        f"update_ratio/{s}global": _series(ratio),
        f"update_ratio/{s}dense": _series([*ratio[:8], 1e-9, 1e-9]),
        f"update_ratio/{s}dense/kernel": _series(ratio),
        f"spikes/{s}max_norm": _series(maxima),
        f"spikes/{s}max_step": _series(np.array(STEPS) - 63),
        f"skipped/{s}spikes": _series(np.minimum(np.arange(10) // 4, 2) + seed),
        f"noise_scale/{s}batch_ratio": _series(np.linspace(2.0, 3.0 + seed, 10)),
        f"noise_scale/{s}b_simple": _series(np.linspace(64.0, 96.0 + seed, 10)),
        f"clip/{s}fraction": _series([1.0] + [0.5] * 4 + [0.0] * 5),
    }


@pytest.fixture
def logs(tmp_path):
    for seed in range(3):
        write_simple_values(str(tmp_path / f"adam_seed{seed}"), _signals(seed))
    write_simple_values(str(tmp_path / "sgd_seed0"), _signals(7, scope="actor"))
    plain = {"grad_norm/global": _series(np.ones(len(STEPS)))}
    write_simple_values(str(tmp_path / "plain"), plain)
    return tmp_path


def test_each_signal_is_read_with_its_reference_value(logs):
    run = next(r for r in load_runs(str(logs)) if r.name == "adam_seed1")
    tags = _signals(1)
    signals = analyze_run(run).signals
    assert list(signals.update_ratio) == ["global", "dense"]  # not the variable
    ratio = np.array(list(tags["update_ratio/global"].values()), np.float32)
    spread = signals.update_ratio["global"]
    assert spread.median == np.median(ratio.astype(np.float64))
    assert (spread.low, spread.high, spread.last) == (
        ratio.min(),
        ratio.max(),
        ratio[-1],
    )
    assert (spread.outside, signals.update_ratio["dense"].outside) == (0, 2)
    assert signals.spike == (41.0, 337)
    assert signals.skipped_spikes == 3
    assert (signals.batch_ratio.last, signals.batch_ratio.median) == (4.0, 3.0)
    assert signals.b_simple.last == 97.0
    # Steps 0..900 covered by 1, then 100 each: 1 + 4 * 50 clipped of 901.
    assert signals.clip_fraction == pytest.approx(201 / 901, rel=1e-12)
    assert analyze_run(run).clip_fraction == signals.clip_fraction


def test_the_report_shows_a_line_per_signal_present(logs, capsys):
    assert main(["report", str(logs), "--no-plots"]) == 0
    out = capsys.readouterr().out
    runs = {block.split(" ==\n")[0]: block for block in out.split("\n== ")[1:]}
    adam = runs["adam_seed1"].splitlines()
    assert "clipping: 22% of steps clipped" in adam
    assert "spikes between summaries: largest global norm 41 at step 337" in adam
    assert "skipped spiking steps: 3" in adam
    assert (
        "gradient noise scale: batch_ratio median 3, range 2 to 4, last 4 "
        "(the batch is near B_simple)" in adam
    )
    assert "B_simple (examples): median 80.5, range 64 to 97, last 97" in adam
    dense = next(line for line in adam if line.startswith("update/weight ratio dense"))
    assert dense.endswith(
        ": outside the healthy band at 2 of 10 summaries (1e-07 to 0.1; about "
        "1e-3 is typical)"
    )
    ratio = next(line for line in adam if line.startswith("update/weight ratio global"))
    assert "inside the healthy band" in ratio
    scoped = runs["sgd_seed0 [actor]"]
    assert "largest global norm 47 at step 337" in scoped
    plain = runs["plain"]
    for absent in ("update/weight", "spikes", "skipped", "noise", "B_simple", "clip"):
        assert absent not in plain
    assert "Signals across seeds" not in out


def test_group_shows_the_median_over_seeds_in_text_and_html(logs, capsys, tmp_path):
    out_dir = tmp_path / "page"
    args = ["report", str(logs), "--group", r"(.*)_seed\d+", "--out", str(out_dir)]
    assert main(args) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    start = lines.index("Signals across seeds (--group):")
    header, adam, sgd = (line.split("  ") for line in lines[start + 2 : start + 5])
    assert [c.strip() for c in header if c.strip()][:3] == [
        "group",
        "runs",
        "update ratio",
    ]
    cells = [c.strip() for c in adam if c.strip()]
    medians = [
        np.median(
            np.array(list(_signals(seed)["update_ratio/global"].values()), np.float32)
        )
        for seed in range(3)
    ]
    assert cells == [
        "adam",
        "3",
        f"{format_number(float(np.median(medians)))} (3)",
        "41 (3)",  # largest spikes 40, 41, 42
        "3 (3)",  # skipped 2, 3, 4
        "22% (3)",
        "4 (3)",  # last batch_ratio 3, 4, 5
        "97 (3)",
    ]
    assert [c.strip() for c in sgd if c.strip()][:2] == ["sgd [actor]", "1"]
    page = (out_dir / "report.html").read_text()
    assert "<h2>Signals across seeds</h2>" in page
    assert "<td>41 (3)</td>" in page and "<td>sgd [actor]</td>" in page
    assert "spikes between summaries: largest global norm 41 at step 337" in page
