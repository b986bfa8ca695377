"""The RL section as console text and HTML: a table per run, details, and
the groups of seeds (`--group`)."""

from __future__ import annotations

from keras_gradmon.alerts.events import CRITICAL, WARNING, format_number
from keras_gradmon.report.rl import EVAL_RETURN, GroupSummary, RLReport


def _value(report: RLReport, name: str) -> float | None:
    last = report.last(name)
    return None if last is None else last[1]


def _cell(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:.0%}" if percent else format_number(value)


def rl_rows(reports: list[RLReport]) -> list[list[str]]:
    """The RL table: a header, then one row per monitored agent."""
    rows = [
        [
            "run",
            "final return",
            "min / max",
            "episodes",
            "solved",
            "value/return",
            "entropy",
            "intensity",
            "env steps/s",
            "alerts W/C",
        ]
    ]
    for r in reports:
        low, high = _value(r, "episode/return_min"), _value(r, "episode/return_max")
        rows.append(
            [
                r.title,
                _cell(r.final_return),
                "-" if low is None else f"{_cell(low)} / {_cell(high)}",
                _cell(_value(r, "episode/count")),
                _cell(_value(r, "episode/solve_rate"), percent=True),
                _cell(_value(r, "value/overestimation")),
                _cell(_value(r, "policy/entropy_fraction"), percent=True),
                _cell(_value(r, "progress/training_intensity")),
                _cell(_value(r, "progress/env_steps_per_sec")),
                f"{r.alert_count(WARNING)}/{r.alert_count(CRITICAL)}",
            ]
        )
    return rows


#: The detail lines: a label, then (signal, words) pairs shown when present.
_DETAILS = (
    (
        "return of the last episodes",
        (
            ("episode/return_mean", "mean"),
            ("episode/return_median", "median"),
            ("episode/return_min", "min"),
            ("episode/return_max", "max"),
            ("episode/return_std", "std"),
        ),
    ),
    (
        "evaluation",
        (
            ("eval/return_mean", "mean return"),
            ("eval/return_min", "min"),
            ("eval/return_max", "max"),
            ("eval/episodes", "episodes"),
        ),
    ),
    (
        "episodes",
        (
            ("episode/count", "count"),
            ("episode/length_mean", "mean length"),
            ("episode/length_max", "max length"),
            ("episode/solve_rate", "solve rate"),
        ),
    ),
    (
        "value at the start states",
        (
            ("value/start_estimate", "estimate"),
            ("value/start_return", "realized discounted return"),
            ("value/overestimation", "ratio"),
        ),
    ),
    (
        "policy",
        (
            ("policy/entropy_fraction", "entropy / max"),
            ("policy/entropy", "entropy (nats)"),
            ("policy/kl", "KL"),
            ("policy/approx_kl", "approx KL"),
            ("policy/clip_fraction", "clip fraction"),
            ("policy/explained_variance", "explained variance"),
        ),
    ),
    (
        "progress",
        (
            ("progress/env_steps", "env steps"),
            ("progress/train_steps", "train steps"),
            ("progress/training_intensity", "training intensity"),
            ("progress/env_steps_per_sec", "env steps/s"),
            ("progress/updates_per_sec", "updates/s"),
        ),
    ),
)


def rl_details(report: RLReport) -> list[str]:
    """The last value of each RL signal, a line per kind."""
    final = report.last("episode/return_mean")
    lines = [] if final is None else [f"last summary with episodes: step {final[0]}"]
    for label, names in _DETAILS:
        parts = [
            f"{words} {format_number(value)}"
            for name, words in names
            if (value := _value(report, name)) is not None
        ]
        if parts:
            lines.append(f"{label}: " + ", ".join(parts))
    return lines


def rl_text(report: RLReport, max_alerts: int = 20) -> str:
    """One agent's RL details and alerts, for the console."""
    lines = [f"== {report.title} ==", *rl_details(report)]
    lines.append(f"alerts ({len(report.alerts)}):" if report.alerts else "alerts: none")
    shown = report.alerts[:max_alerts]
    lines += [f"  {a.get('message', a.get('rule'))}" for a in shown]
    if len(report.alerts) > max_alerts:
        lines.append(f"  ... and {len(report.alerts) - max_alerts} more (see the HTML)")
    return "\n".join(lines)


def _interval(ci: tuple[float, float]) -> str:
    return f"[{format_number(ci[0])}, {format_number(ci[1])}]"


def group_rows(groups: list[GroupSummary]) -> list[list[str]]:
    """The groups table: final return across seeds."""
    rows = [
        ["group", "return", "seeds", "median", "95% CI", "IQM", "95% CI", "min", "max"]
    ]
    for g in groups:
        rows.append(
            [
                g.key,
                "eval" if g.source == EVAL_RETURN else "collect",
                str(len(g.runs)),
                format_number(g.median),
                _interval(g.median_ci),
                format_number(g.iqm),
                _interval(g.iqm_ci),
                format_number(g.low),
                format_number(g.high),
            ]
        )
    return rows


def group_notes(groups: list[GroupSummary]) -> list[str]:
    """Members of each group, and those without episode statistics."""
    notes = []
    for g in groups:
        notes.append(f"{g.key}: {', '.join(g.runs)}")
        if g.missing:
            notes.append(f"  without episode statistics: {', '.join(g.missing)}")
    return notes


GROUPS_CAPTION = (
    "Final return: the mean return of the last collect episodes at each run's "
    "last summary (collect), or of its last evaluation when every seed "
    "recorded evaluations (eval). IQM: mean of the middle half of the seeds. "
    "95% CI: stratified bootstrap (2000 resamples, percentile)."
)
