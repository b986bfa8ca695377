"""The `keras-gradmon` command: `report` and `demo`."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING

from keras_gradmon import defaults

if TYPE_CHECKING:
    from keras_gradmon.report.analysis import HealthCriteria
    from keras_gradmon.report.render import Contents

#: Exit codes: alerts at or above `--fail-on` found; a usage or input error.
EXIT_ALERTS = 1
EXIT_ERROR = 2

#: What TensorFlow prints while it loads and finds its devices that tells a
#: user of this command nothing: absl's INFO and WARNING lines (`I0000 ...
#: port.cc] oneDNN custom operations are on`, `Could not find cuda
#: drivers`), which it prints whatever `TF_CPP_MIN_LOG_LEVEL` says, and
#: absl's notice that it logs to standard error before it is initialized.
TF_NOTICES = re.compile(
    r"^(?:[IW]\d{4} |WARNING: All log messages before absl::InitializeLog\(\))"
)
#: Without a CUDA driver TensorFlow says so (above), then logs the failed
#: `cuInit` as an error (`E0000 ... failed call to cuInit`): expected on a
#: CPU machine, so dropped there, and only there.
NO_DRIVER, FAILED_CUINIT = "Could not find cuda drivers", "failed call to cuInit"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-gradmon",
        description="Gradient and activation monitoring for Keras and tf-agents.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser(
        "report",
        help="training-health report from TensorBoard logs",
        description=(
            "Reads the event files under LOGDIR (checking every record) and "
            "prints, per run: the global gradient norm over time, clipping, "
            "skipped steps, summary steps dropped by the history buffer, the "
            "final loss (Keras's epoch_loss or tf-agents' Losses/*), alerts "
            "in order and the layers that look unhealthy; for RL runs (rl/... "
            "tags) the return, entropy, value against return, training "
            "intensity and throughput; the update/weight ratio, spikes between "
            "summaries, skipped spikes and the gradient noise scale where "
            "written; with --group, the final return and those signals across "
            "seeds. Writes PNG plots and a self-contained HTML page into "
            "LOGDIR/report, or into --out DIR."
        ),
    )
    _report_arguments(report)
    demo = commands.add_parser(
        "demo",
        help="train the embedded model twice (exploding, then clipped) and report",
    )
    demo.add_argument("--logdir", default=None, help="where to write the logs")
    demo.add_argument("--epochs", type=int, default=5)
    demo.add_argument("--quiet", action="store_true", help="no per-batch progress bar")
    return parser


def _report_arguments(report: argparse.ArgumentParser) -> None:
    report.add_argument("logdir", metavar="LOGDIR")
    report.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help=(
            "where the PNG plots and report.html go (default: LOGDIR/report); "
            "made with its parents if missing; must not be a file"
        ),
    )
    report.add_argument(
        "--fail-on",
        choices=("warning", "critical"),
        default=None,
        help=f"exit with {EXIT_ALERTS} if any alert of this tier or worse exists",
    )
    report.add_argument(
        "--no-plots", action="store_true", help="console text only: no PNG, no HTML"
    )
    report.add_argument(
        "--group",
        metavar="REGEX",
        default=None,
        help=(
            "aggregate runs across seeds (RL returns, and the gradient "
            "signals): runs whose name matches REGEX "
            "(re.search) are grouped by its capture groups, or by the matched "
            "text, e.g. --group '(.*)_seed[0-9]+'"
        ),
    )
    report.add_argument(
        "--std-band",
        nargs=2,
        type=float,
        metavar=("LOW", "HIGH"),
        default=defaults.STD_BAND,
        help="healthy activation std band (default {} {})".format(*defaults.STD_BAND),
    )
    report.add_argument(
        "--dead-fraction",
        type=float,
        default=defaults.DEAD_FRACTION,
        help=(
            "flag layers with more dead units than this fraction "
            f"(default {defaults.DEAD_FRACTION})"
        ),
    )


def run_report(
    log_dir: str,
    out_dir: str | None = None,
    fail_on: str | None = None,
    plots: bool = True,
    criteria: HealthCriteria | None = None,
    group: str | None = None,
) -> int:
    """Prints the report of `log_dir`; returns the exit code."""
    from keras_gradmon.report.analysis import (
        analyze,
        failing_count,
        group_signals,
    )
    from keras_gradmon.report.events import ReportError, load_runs
    from keras_gradmon.report.render import Contents, report_text
    from keras_gradmon.report.rl import analyze_rl, group_reports

    try:
        runs = load_runs(log_dir)
    except ReportError as error:
        print(f"keras-gradmon report: {error}", file=sys.stderr)
        return EXIT_ERROR
    rl, reports = analyze_rl(runs), analyze(runs, criteria)
    contents = Contents(
        reports=reports,
        rl=rl,
        groups=group_reports(rl, group) if group else [],
        damaged=[damage for run in runs for damage in run.damaged],
        signal_groups=group_signals(reports, group) if group else [],
        unread=[note for run in runs for note in run.unread_notes],
    )
    print(report_text(log_dir, contents))
    for damage in contents.damaged:
        print(f"keras-gradmon report: {damage.message}", file=sys.stderr)
    if contents.empty and contents.damaged:
        return EXIT_ERROR
    if plots and not contents.empty and not _write_page(log_dir, out_dir, contents):
        return EXIT_ERROR
    if fail_on is not None:
        failing = failing_count([*contents.reports, *contents.rl], fail_on)
        if failing:
            print(
                f"\n{failing} alert(s) at {fail_on} or worse: exit {EXIT_ALERTS}",
                file=sys.stderr,
            )
            return EXIT_ALERTS
    return 0


def _write_page(log_dir: str, out_dir: str | None, contents: Contents) -> bool:
    """Writes the plots and HTML page; False (with a message) if it cannot."""
    from keras_gradmon.report.render import report_html, write_plots

    out_dir = out_dir or os.path.join(log_dir, "report")
    page = os.path.join(out_dir, "report.html")
    try:
        written = write_plots(contents, out_dir)
        with open(page, "w", encoding="utf-8") as file:
            file.write(report_html(log_dir, contents, written))
    except OSError as error:
        print(
            f"keras-gradmon report: cannot write the plots and HTML into "
            f"{out_dir!r} ({error}). Pass another directory with --out DIR.",
            file=sys.stderr,
        )
        return False
    print(f"\nPlots and HTML report: {os.path.abspath(page)}")
    return True


def _check_out(out_dir: str | None) -> str | None:
    """An error message for an `--out` that is (or is under) a file, else None."""
    if out_dir is None:
        return None
    path = out_dir
    while path and not os.path.exists(path):
        parent = os.path.dirname(path.rstrip(os.sep))
        if parent == path:
            break
        path = parent
    if path and os.path.exists(path) and not os.path.isdir(path):
        return (
            f"--out must be a directory (made if missing), and {path!r} is a "
            f"file. Received: --out {out_dir!r}"
        )
    return None


def _check_group(pattern: str | None) -> str | None:
    """An error message for an invalid `--group` regex, else None."""
    if pattern is None:
        return None
    try:
        re.compile(pattern)
    except re.error as error:
        return (
            f"--group must be a valid regular expression ({error}). "
            f"Received: --group {pattern!r}"
        )
    return None


def _report(args: argparse.Namespace) -> int:
    low, high = args.std_band
    if not 0 <= low < high or not 0 < args.dead_fraction < 1:
        print(
            "--std-band must be 0 <= LOW < HIGH and --dead-fraction in (0, 1). "
            f"Received: --std-band {low:g} {high:g} "
            f"--dead-fraction {args.dead_fraction:g}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    problem = _check_group(args.group) or _check_out(args.out)
    if problem is not None:
        print(problem, file=sys.stderr)
        return EXIT_ERROR
    from keras_gradmon.report.analysis import HealthCriteria

    criteria = HealthCriteria(std_band=(low, high), dead_fraction=args.dead_fraction)
    return run_report(
        args.logdir, args.out, args.fail_on, not args.no_plots, criteria, args.group
    )


def tensorflow_errors(text: str) -> str:
    """`text`, what TensorFlow wrote to standard error while loading, less
    its notices (`TF_NOTICES`, and the failed `cuInit` when it said that
    the machine has no CUDA driver): errors and Python warnings stay.

    Example:

    >>> print(tensorflow_errors(
    ...     "I0000 00:00:1.2 1 cudart_stub.cc:31] Could not find cuda drivers\\n"
    ...     "E0000 00:00:1.3 1 cuda_platform.cc:52] failed call to cuInit: 303\\n"
    ...     "E0000 00:00:1.4 1 other.cc:7] a real error\\n"), end="")
    E0000 00:00:1.4 1 other.cc:7] a real error
    """
    no_driver = NO_DRIVER in text
    return "".join(
        line
        for line in text.splitlines(keepends=True)
        if not TF_NOTICES.match(line) and not (no_driver and FAILED_CUINIT in line)
    )


def import_tensorflow_quietly() -> None:
    """Imports TensorFlow and lets it find its devices with standard error
    (the file descriptor: its C++ logs bypass Python) captured, then writes
    back what `tensorflow_errors` keeps. Does nothing when TensorFlow is
    imported already or not installed, or Keras is to use another backend.
    """
    if (
        "tensorflow" in sys.modules
        or os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow"
        or importlib.util.find_spec("tensorflow") is None
    ):
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.list_physical_devices()  # where it calls cuInit
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", errors="replace")
            sys.stderr.write(tensorflow_errors(text))
            sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.command == "report":
        return _report(args)
    if args.epochs < 1:
        print(
            f"--epochs must be >= 1. Received: --epochs={args.epochs}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    import_tensorflow_quietly()
    from keras_gradmon.demo import run_demo

    log_dir = run_demo(args.logdir, epochs=args.epochs, verbose=0 if args.quiet else 1)
    return run_report(log_dir)


if __name__ == "__main__":
    sys.exit(main())
