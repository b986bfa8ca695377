"""Issue 21's signals as report text: a line per signal a run wrote, and the
table of the groups of seeds (`--group`)."""

from __future__ import annotations

from keras_gradmon.formatting import format_number
from keras_gradmon.report.signals import (
    COLUMNS,
    FAR_ABOVE,
    FAR_BELOW,
    SignalGroup,
    Signals,
    Spread,
)

SIGNAL_GROUPS_CAPTION = (
    "Signals across seeds: the median over the runs that wrote each (their "
    "count in brackets). Update ratio: each run's median of update_ratio/"
    "global; max spike: each run's largest global norm between summaries; "
    "clipped: each run's share of steps clipped; batch_ratio and b_simple: "
    "each run's last value."
)

FAR_BELOW_TEXT = "the batch is far below B_simple"
FAR_ABOVE_TEXT = "the batch is far above B_simple"


def _spread(spread: Spread) -> str:
    return (
        f"median {format_number(spread.median)}, range "
        f"{format_number(spread.low)} to {format_number(spread.high)}, last "
        f"{format_number(spread.last)}"
    )


def _ratio_line(subject: str, spread: Spread, band: tuple[float, float]) -> str:
    where = (
        "inside the healthy band"
        if not spread.outside
        else f"outside the healthy band at {spread.outside} of "
        f"{spread.summaries} summaries"
    )
    return (
        f"update/weight ratio {subject}: {_spread(spread)}: {where} "
        f"({band[0]:g} to {band[1]:g}; about 1e-3 is typical)"
    )


def batch_verdict(ratio: float) -> str:
    """What `noise_scale/batch_ratio` (B_simple / batch) says.

    Example:

    >>> batch_verdict(40.0)
    'the batch is far below B_simple: a larger batch would train in fewer steps'
    """
    if ratio > FAR_BELOW:
        return f"{FAR_BELOW_TEXT}: a larger batch would train in fewer steps"
    if ratio < FAR_ABOVE:
        return f"{FAR_ABOVE_TEXT}: a smaller one would waste less compute"
    return "the batch is near B_simple"


def signal_lines(signals: Signals) -> list[str]:
    """A line per signal present in a run (the share of steps clipped is
    the report's "clipping" line).

    Example:

    >>> signal_lines(Signals(update_ratio={}, skipped_spikes=2))
    ['skipped spiking steps: 2']
    """
    lines = [
        _ratio_line(subject, spread, signals.band)
        for subject, spread in signals.update_ratio.items()
    ]
    if signals.spike is not None:
        norm, step = signals.spike
        lines.append(
            f"spikes between summaries: largest global norm "
            f"{format_number(norm)} at step {step}"
        )
    if signals.skipped_spikes is not None:
        lines.append(f"skipped spiking steps: {signals.skipped_spikes}")
    if signals.batch_ratio is not None:
        lines.append(
            f"gradient noise scale: batch_ratio {_spread(signals.batch_ratio)} "
            f"({batch_verdict(signals.batch_ratio.last)})"
        )
    if signals.b_simple is not None:
        lines.append(f"B_simple (examples): {_spread(signals.b_simple)}")
    return lines


def _cell(title: str, value: tuple[float, int] | None) -> str:
    if value is None:
        return "-"
    median, runs = value
    shown = f"{median:.0%}" if title == "clipped" else format_number(median)
    return f"{shown} ({runs})"


def signal_group_rows(groups: list[SignalGroup]) -> list[list[str]]:
    """The groups' table: a header, then one row per group; a column per
    signal some group has."""
    titles = [t for t, _ in COLUMNS if any(t in g.values for g in groups)]
    rows = [["group", "runs", *titles]]
    for g in groups:
        cells = [_cell(t, g.values.get(t)) for t in titles]
        rows.append([g.key, str(len(g.runs)), *cells])
    return rows
