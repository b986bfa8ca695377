"""The report's PNG plots (matplotlib, no display needed)."""

from __future__ import annotations

import numpy as np

from keras_gradmon.report.analysis import RunReport

_TIER_COLORS = {"warning": "#e69f00", "critical": "#d62728"}


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def plot_norms(report: RunReport, path: str) -> None:
    """Global and group gradient norms over steps (log scale), alert markers."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(8, 4), dpi=100)
    for name, (steps, values) in report.groups.items():
        shown = np.where(np.isfinite(values) & (values > 0), values, np.nan)
        if np.isfinite(shown).any():
            axes.plot(steps, shown, label=name, lw=2 if name == "global" else 1)
    labelled = set()
    for alert in report.alerts:
        tier = alert.get("tier", "warning")
        axes.axvline(
            int(alert.get("step", 0)),
            color=_TIER_COLORS.get(tier, "gray"),
            ls="--",
            lw=0.8,
            alpha=0.7,
            label=f"{tier} alert" if tier not in labelled else None,
        )
        labelled.add(tier)
    axes.set_yscale("log")
    axes.set_xlabel("step")
    axes.set_ylabel("gradient L2 norm")
    axes.set_title(f"Gradient norms: {report.title}")
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=8, loc="best")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_layer_heatmap(report: RunReport, path: str) -> bool:
    """log10 gradient norm per layer (rows) and summary step (columns).

    Returns:
        False (and writes nothing) when the run has no per-layer norms.
    """
    layers = [k for k, (s, _) in report.layer_norms.items() if s.size]
    if not layers:
        return False
    steps = sorted({int(s) for k in layers for s in report.layer_norms[k][0]})
    column = {step: i for i, step in enumerate(steps)}
    grid = np.full((len(layers), len(steps)), np.nan)
    for row, layer in enumerate(layers):
        for step, value in zip(*report.layer_norms[layer]):
            if np.isfinite(value) and value > 0:
                grid[row, column[int(step)]] = np.log10(value)
    plt = pyplot()
    height = 1.5 + 0.35 * len(layers)
    figure, axes = plt.subplots(figsize=(8, height), dpi=100)
    image = axes.imshow(
        np.ma.masked_invalid(grid),
        aspect="auto",
        interpolation="nearest",
        cmap="viridis",
    )
    axes.set_yticks(range(len(layers)), layers, fontsize=8)
    ticks = np.linspace(0, len(steps) - 1, min(len(steps), 8)).astype(int)
    axes.set_xticks(ticks, [str(steps[i]) for i in ticks], fontsize=8)
    axes.set_xlabel("step")
    axes.set_title(f"log10 gradient norm per layer: {report.title}")
    figure.colorbar(image, ax=axes, label="log10 norm")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True
