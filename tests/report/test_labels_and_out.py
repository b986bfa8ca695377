"""A log directory without run subfolders is labelled with its own name;
`--out DIR` puts the plots and HTML elsewhere, and is validated."""

from __future__ import annotations

import os
import re

from keras_gradmon.cli import EXIT_ERROR, main
from tests.report.writers import norms, write_tensor_scalars

STEPS = range(0, 50, 10)


def _report(capsys, *args) -> tuple[int, str, str]:
    code = main(["report", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _run_cells(out: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("run ")))
    rows = lines[start + 1 : lines.index("", start)]
    return [re.split(r"\s{2,}", row)[0] for row in rows]


def test_a_directory_without_run_subfolders_is_labelled_with_its_name(
    tmp_path, capsys, monkeypatch
):
    log_dir = tmp_path / "logs" / "dqn_run"
    write_tensor_scalars(str(log_dir), norms(STEPS))
    code, out, _ = _report(capsys, log_dir, "--out", tmp_path / "out")
    assert code == 0
    assert _run_cells(out) == ["dqn_run"]
    assert "== dqn_run ==" in out and "== . ==" not in out
    assert sorted(os.listdir(tmp_path / "out")) == ["dqn_run_norms.png", "report.html"]
    monkeypatch.chdir(log_dir)  # `report .` and a trailing slash, too
    assert _run_cells(_report(capsys, ".", "--no-plots")[1]) == ["dqn_run"]
    monkeypatch.chdir(tmp_path)
    assert _run_cells(_report(capsys, "logs/dqn_run/", "--no-plots")[1]) == ["dqn_run"]


def test_runs_in_subfolders_keep_their_relative_paths(tmp_path, capsys):
    write_tensor_scalars(str(tmp_path / "a" / "train"), norms(STEPS))
    write_tensor_scalars(str(tmp_path / "b"), norms(STEPS, "actor"))
    _, out, _ = _report(capsys, tmp_path, "--no-plots")
    assert _run_cells(out) == [os.path.join("a", "train"), "b [actor]"]


def test_out_puts_the_plots_and_html_there_and_nothing_in_the_logs(tmp_path, capsys):
    log_dir = tmp_path / "logs"
    write_tensor_scalars(str(log_dir / "run"), norms(STEPS))
    before = sorted(p.relative_to(log_dir) for p in log_dir.rglob("*"))
    out_dir = tmp_path / "elsewhere" / "nested"  # made, with its parents
    code, out, _ = _report(capsys, log_dir, "--out", out_dir)
    assert code == 0
    assert sorted(os.listdir(out_dir)) == ["report.html", "run_norms.png"]
    assert sorted(p.relative_to(log_dir) for p in log_dir.rglob("*")) == before
    assert f"Plots and HTML report: {out_dir / 'report.html'}" in out
    page = (out_dir / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 1


def test_without_out_the_report_goes_into_logdir_report(tmp_path, capsys):
    write_tensor_scalars(str(tmp_path / "run"), norms(STEPS))
    assert _report(capsys, tmp_path)[0] == 0
    assert sorted(os.listdir(tmp_path / "report")) == [
        "report.html",
        "run_norms.png",
    ]


def test_out_that_is_a_file_is_a_clear_error(tmp_path, capsys):
    write_tensor_scalars(str(tmp_path / "run"), norms(STEPS))
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    for value in (taken, taken / "sub"):
        code, out, err = _report(capsys, tmp_path, "--out", value)
        assert code == EXIT_ERROR and out == ""
        assert err == (
            f"--out must be a directory (made if missing), and {str(taken)!r} is "
            f"a file. Received: --out {str(value)!r}\n"
        )
    assert taken.read_text() == "mine"
    assert not (tmp_path / "report").exists()


def test_a_directory_that_cannot_be_written_is_an_error(tmp_path, capsys):
    from keras_gradmon.cli import run_report

    write_tensor_scalars(str(tmp_path / "run"), norms(STEPS))
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    # run_report (as `demo` calls it) does not check --out first: the writing
    # itself fails, with a message and exit 2 instead of a traceback.
    assert run_report(str(tmp_path), out_dir=str(taken / "sub")) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith(
        f"keras-gradmon report: cannot write the plots and HTML into "
        f"{str(taken / 'sub')!r} ("
    )
    assert err.endswith("Pass another directory with --out DIR.\n")
