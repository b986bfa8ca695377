"""Summary steps lost to an overflowing history buffer (`dropped/summaries`,
`dropped/<scope>/summaries`, cumulative; `.../histograms` for histogram
steps) are shown per run and per scope, with the hint to raise
`summary_history`."""

from __future__ import annotations

from keras_gradmon.cli import main
from keras_gradmon.columns import tag
from tests.report.writers import norms, write_tensor_scalars

STEPS = range(0, 50, 10)
HINT = "raise `summary_history`"


def _report(capsys, *args) -> str:
    assert main(["report", *map(str, args)]) == 0
    return capsys.readouterr().out


def _dropped(
    counts: list[float], scope: str | None = None, kind: str = "summaries"
) -> dict:
    return {tag("dropped", kind, scope): dict(zip(STEPS, counts))}


def _section(out: str, title: str) -> str:
    return out.split(f"== {title} ==")[1].split("\n== ")[0]


def _line(count: str, kind: str = "summary") -> str:
    return (
        f"dropped {kind} steps: {count} recorded {kind} step(s) were lost: the "
        f"history buffer overflowed between two host reads ({HINT})"
    )


def test_dropped_summaries_are_shown_per_run_and_scope(tmp_path, capsys):
    write_tensor_scalars(
        str(tmp_path / "lossy"), {**norms(STEPS), **_dropped([0, 0, 3, 3, 7])}
    )
    write_tensor_scalars(
        str(tmp_path / "fine"), {**norms(STEPS), **_dropped([0, 0, 0, 0, 0])}
    )
    scoped = {
        **norms(STEPS, "actor"),
        **norms(STEPS, "critic"),
        **_dropped([0, 1, 2, 2, 2], "critic"),
        **_dropped([0, 0, 1, 1, 1], "critic", "histograms"),
        **_dropped([0] * 5, "actor"),
    }
    write_tensor_scalars(str(tmp_path / "sac"), scoped)
    out = _report(capsys, tmp_path, "--out", tmp_path / "out")
    assert _line("7") in _section(out, "lossy")
    assert _line("2") in _section(out, "sac [critic]")
    assert _line("1", "histogram") in _section(out, "sac [critic]")
    for quiet in ("fine", "sac [actor]"):
        assert "dropped" not in _section(out, quiet)
    warnings = [line for line in out.splitlines() if line.startswith("WARNING")]
    assert warnings == [
        f"WARNING: lossy: 7 summary step(s) dropped ({HINT})",
        f"WARNING: sac [critic]: 2 summary step(s) and 1 histogram step(s) "
        f"dropped ({HINT})",
    ]
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.count(HINT) == 5  # the two warnings and the three details


def test_a_run_without_the_tag_says_nothing_of_it(tmp_path, capsys):
    write_tensor_scalars(str(tmp_path / "run"), norms(STEPS))
    out = _report(capsys, tmp_path, "--no-plots")
    assert "dropped" not in out and "summary_history" not in out


def test_a_run_whose_only_tag_is_the_count_still_shows_it(tmp_path, capsys):
    write_tensor_scalars(str(tmp_path / "run"), _dropped([0, 0, 0, 4, 9]))
    out = _report(capsys, tmp_path, "--no-plots")
    assert f"WARNING: run: 9 summary step(s) dropped ({HINT})" in out
    assert _line("9") in _section(out, "run")
