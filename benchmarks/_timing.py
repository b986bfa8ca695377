"""Timing helpers shared by the benchmarks: interleaved repetitions, ratios to
a baseline, and a plain-text or Markdown table. Framework-free (no TF import).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence


def interleaved_times(
    units: Mapping[str, Callable[[], object]],
    reps: int,
    cpu: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of each unit, `reps` times, the units taking turns.

    Each repetition runs every unit once, in order, so slow drift of the
    machine (thermal, other processes) hits all units alike. Warm up (compile)
    the units before calling this. `cpu`, if given, receives the CPU seconds
    (`time.process_time`, all threads) of each call: wall time on a shared
    machine is bimodal, CPU time much less so.
    """
    times: dict[str, list[float]] = {name: [] for name in units}
    for _ in range(reps):
        for name, unit in units.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            unit()
            times[name].append(time.perf_counter() - start)
            if cpu is not None:
                cpu.setdefault(name, []).append(time.process_time() - start_cpu)
    return times


def summarize(
    times: Mapping[str, Sequence[float]],
    baseline: str,
    targets: Mapping[str, float] | None = None,
    cpu: Mapping[str, Sequence[float]] | None = None,
) -> list[dict]:
    """One row per unit: median and mean seconds, ratios to `baseline`.

    `ratio` is median(unit) / median(baseline); `min_ratio` the same with
    the fastest repetition of each (interference from other work on the
    machine only ever adds time, so the minimum is the most repeatable
    estimate on a shared or noisy machine, as `timeit` advises);
    `mean_ratio` the same with means (it counts the rare expensive
    repetitions the median hides); `spread` the (min, max) over repetitions
    of unit / baseline in the same repetition. `ok` is whether the median
    ratio is within the unit's target (the issue's targets are medians of
    interleaved repetitions), or None when it has no target. With `cpu`
    (from `interleaved_times`), `cpu_ratio` is the median CPU-time ratio.
    """
    targets = targets or {}
    cpu = cpu or {}
    base = times[baseline]
    base_median, base_mean = statistics.median(base), statistics.fmean(base)
    rows = []
    for name, values in times.items():
        per_rep = [v / b for v, b in zip(values, base, strict=True)]
        ratio = statistics.median(values) / base_median
        target = targets.get(name)
        rows.append(
            {
                "name": name,
                "times": list(values),
                "median": statistics.median(values),
                "ratio": ratio,
                "min_ratio": min(values) / min(base),
                "mean_ratio": statistics.fmean(values) / base_mean,
                "spread": (min(per_rep), max(per_rep)),
                "target": target,
                "ok": None if target is None else ratio <= target,
            }
        )
        if name in cpu and baseline in cpu:
            rows[-1]["cpu_ratio"] = statistics.median(cpu[name]) / statistics.median(
                cpu[baseline]
            )
    return rows


def format_table(rows: Sequence[dict], markdown: bool = False) -> str:
    """Rows of `summarize` (with an added "model" key) as a table; rows with
    a "first_fit" key (the first call's seconds, compilation included) get
    that column and its ratio too."""
    compile_times = all("first_fit" in row for row in rows)
    cpu = all("cpu_ratio" in row for row in rows)
    header = ["model", "variant", "min s/epoch", "min ratio", "median ratio"]
    if cpu:
        header += ["CPU ratio"]
    if not markdown:
        header += ["min-max", "mean ratio"]
    if compile_times:
        header += ["first fit s", "first fit ratio"]
    header += ["target", "pass/fail"]
    lines = []
    for row in rows:
        target = "-" if row["target"] is None else f"<= {row['target']:.2f}x"
        verdict = {None: "-", True: "pass", False: "FAIL"}[row["ok"]]
        cells = [
            row["model"],
            row["name"],
            f"{min(row['times']):.3f}",
            f"{row['min_ratio']:.2f}x",
            f"{row['ratio']:.2f}x",
        ]
        if cpu:
            cells += [f"{row['cpu_ratio']:.2f}x"]
        if not markdown:
            low, high = row["spread"]
            cells += [f"{low:.2f}-{high:.2f}", f"{row['mean_ratio']:.2f}x"]
        if compile_times:
            cells += [f"{row['first_fit']:.1f}", f"{row['first_fit_ratio']:.2f}x"]
        lines.append([*cells, target, verdict])
    if markdown:
        rule = ["---"] * 2 + ["---:"] * (len(header) - 3) + [":---:"]
        return "\n".join(
            "| " + " | ".join(cells) + " |" for cells in [header, rule, *lines]
        )
    widths = [max(len(c[i]) for c in [header, *lines]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
        for cells in [header, *lines]
    )


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, where there is one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
