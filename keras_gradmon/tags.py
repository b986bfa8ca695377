"""The TensorBoard tag scheme, and the numbers that go under each tag.

Tags put the statistic first so that TensorBoard groups cards by statistic:

| tag                                   | value                                   |
|---------------------------------------|-----------------------------------------|
| `grad_norm/global`                    | L2 norm of all gradient elements        |
| `grad_norm/<group>`                   | L2 norm of a group's gradient elements  |
| `grad_nonfinite/global`               | number of NaN/Inf gradient elements     |
| `grad_missing/global`                 | number of variables with a None gradient|
| `grad_<stat>/<variable path>`         | per-variable statistic (see STATISTICS) |
| `weight_norm/...`, `weight_<stat>/...` | the same for the weights        |
| `grad_to_weight/<variable path>`      | gradient norm / weight norm             |
| `clip/pre_norm`, `clip/post_norm`     | global norm before / after clipping     |
| `clip/scale`, `clip/fraction`         | post/pre norm; fraction of steps clipped|
| `skipped/steps`                       | non-finite steps skipped so far         |
| `loss_scale/scale`                    | a wrapped loss scaler's current scale   |
| `grad_hist/<variable path>`           | gradient histogram                      |
| `weight_hist/<variable path>`         | weight histogram                        |
| `activation_<stat>/<layer>`           | activation statistic (ActivationMonitor)|
| `activation_hist/<layer>`             | activation histogram                    |

With `tag_scope="actor"` every tag becomes `<statistic>/actor/<subject>`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Sequence

import numpy as np

from keras_gradmon.activations.probe import ACTIVATION_STATISTICS, ActivationSnapshot
from keras_gradmon.config import MonitorConfig
from keras_gradmon.state import COLUMNS, HistogramSnapshot, Snapshot

GLOBAL = "global"


def tag(statistic: str, subject: str, scope: str | None = None) -> str:
    """The tag of `statistic` for `subject` (`global`, a group or a variable).

    Example:

    >>> tag("grad_norm", "global", scope="actor")
    'grad_norm/actor/global'
    """
    return f"{statistic}/{scope}/{subject}" if scope else f"{statistic}/{subject}"


@dataclasses.dataclass(frozen=True)
class ScalarEntry:
    """One scalar to write, and where its value comes from.

    `source` is "total" (`column` is a `GLOBAL_FIELDS` name), "group_grad"
    or "group_weight" (`row` is the group), "grad" or "weight" (`row` the
    variable, `column` a statistic), "ratio" (gradient norm / weight norm of
    variable `row`, written only while the weight norm is above 0) or
    "clip_scale" (post-clip / pre-clip global norm, 1 when the latter is 0).
    """

    tag: str
    source: str
    row: int = 0
    column: str = ""


def scalar_entries(
    config: MonitorConfig,
    paths: Sequence[str],
    groups: Sequence[str],
    present: Collection[int],
    weights: bool,
    loss_scale: bool = False,
) -> list[ScalarEntry]:
    """Every scalar a summary writes: the one tag scheme that both the host
    recorder (`scalar_summaries`) and the in-graph writer resolve.

    Args:
        config: The monitor's options.
        paths: Variable paths, in row order.
        groups: Group names, in row order.
        present: Rows of the variables that had a gradient.
        weights: Whether weight statistics are recorded.
        loss_scale: Whether the monitor wraps a loss scaler (its scale and
            skipped steps are written).
    """
    scope = config.tag_scope
    entries = [
        ScalarEntry(tag(name, GLOBAL, scope), "total", column=name)
        for name in ("grad_norm", "grad_nonfinite", "grad_missing")
    ]
    if config.clip_rule is not None:
        entries += [
            ScalarEntry(
                tag("clip", "pre_norm", scope), "total", column="clip_pre_norm"
            ),
            ScalarEntry(
                tag("clip", "post_norm", scope), "total", column="clip_post_norm"
            ),
            ScalarEntry(tag("clip", "scale", scope), "clip_scale"),
            ScalarEntry(
                tag("clip", "fraction", scope), "total", column="clip_fraction"
            ),
        ]
    if config.skip_nonfinite or loss_scale:
        entries.append(
            ScalarEntry(tag("skipped", "steps", scope), "total", column="skipped_steps")
        )
    if loss_scale:
        entries.append(
            ScalarEntry(tag("loss_scale", "scale", scope), "total", column="loss_scale")
        )
    if weights:
        entries.append(
            ScalarEntry(
                tag("weight_norm", GLOBAL, scope), "total", column="weight_norm"
            )
        )
    for i, group in enumerate(groups):
        entries.append(ScalarEntry(tag("grad_norm", group, scope), "group_grad", i))
        if weights:
            entries.append(
                ScalarEntry(tag("weight_norm", group, scope), "group_weight", i)
            )
    if not config.per_variable:
        return entries
    for i, path in enumerate(paths):
        if i in present:
            entries += [
                ScalarEntry(tag(f"grad_{name}", path, scope), "grad", i, name)
                for name in config.statistics
            ]
        if not weights:
            continue
        entries += [
            ScalarEntry(tag(f"weight_{name}", path, scope), "weight", i, name)
            for name in config.statistics
        ]
        if i in present:
            entries.append(ScalarEntry(tag("grad_to_weight", path, scope), "ratio", i))
    return entries


def scalar_summaries(snapshot: Snapshot, config: MonitorConfig) -> dict[str, float]:
    """`{tag: value}` of every scalar to write for `snapshot`."""
    totals = snapshot.totals
    norm = COLUMNS.index("norm")
    out = {}
    present = set(np.flatnonzero(snapshot.has_grad).tolist())
    weights = snapshot.weight is not None
    loss_scale = math.isfinite(totals["loss_scale"])
    for entry in scalar_entries(
        config, snapshot.paths, snapshot.groups, present, weights, loss_scale
    ):
        i, source = entry.row, entry.source
        if source == "total":
            value = totals[entry.column]
        elif source == "clip_scale":
            pre, post = totals["clip_pre_norm"], totals["clip_post_norm"]
            value = 1.0 if pre == 0 else post / pre
        elif source == "group_grad":
            value = snapshot.group_grad_norm[i]
        elif source == "group_weight":
            value = snapshot.group_weight_norm[i]
        elif source == "ratio":
            weight_norm = float(snapshot.weight[i, norm])
            if not weight_norm > 0:
                continue
            value = float(snapshot.grad[i, norm]) / weight_norm
        else:  # "grad" or "weight"
            matrix = snapshot.grad if source == "grad" else snapshot.weight
            value = matrix[i, COLUMNS.index(entry.column)]
        out[entry.tag] = float(value)
    return out


def histogram_buckets(counts: np.ndarray, value_range: np.ndarray) -> np.ndarray:
    """TensorBoard's `[k, 3]` histogram rows `(left, right, count)`.

    Example:

    >>> histogram_buckets(np.array([1, 2]), np.array([0.0, 1.0])).tolist()
    [[0.0, 0.5, 1.0], [0.5, 1.0, 2.0]]
    """
    k = len(counts)
    low, high = (float(v) for v in value_range)
    if not (math.isfinite(low) and math.isfinite(high)):
        low = high = 0.0
    edges = low + (high - low) * np.arange(k + 1, dtype=np.float64) / k
    edges[-1] = high
    return np.stack([edges[:-1], edges[1:], counts.astype(np.float64)], axis=1)


def histogram_summaries(
    snapshot: HistogramSnapshot, config: MonitorConfig
) -> dict[str, np.ndarray]:
    """`{tag: [k, 3] buckets}` of every histogram to write for `snapshot`."""
    scope = config.tag_scope
    out = {}
    for i, path in enumerate(snapshot.paths):
        if snapshot.has_grad[i]:
            out[tag("grad_hist", path, scope)] = histogram_buckets(
                snapshot.grad_counts[i], snapshot.grad_range[i]
            )
        if snapshot.weight_counts is not None:
            out[tag("weight_hist", path, scope)] = histogram_buckets(
                snapshot.weight_counts[i], snapshot.weight_range[i]
            )
    return out


def activation_scalar_summaries(
    snapshot: ActivationSnapshot, scope: str | None = None
) -> dict[str, float]:
    """`{tag: value}` of every activation scalar: `activation_<stat>/<layer>`.

    Layers the probe did not reach get no value; `saturated_fraction` is
    written for tanh and sigmoid layers only.
    """
    out = {}
    for name in ACTIVATION_STATISTICS:
        for layer, value in snapshot.stat(name).items():
            out[tag(f"activation_{name}", layer, scope)] = value
    return out


def activation_histogram_summaries(
    snapshot: ActivationSnapshot, scope: str | None = None
) -> dict[str, np.ndarray]:
    """`{tag: [k, 3] buckets}` of each reached layer's outputs, or {}."""
    if snapshot.hist_counts is None:
        return {}
    return {
        tag("activation_hist", layer, scope): histogram_buckets(
            snapshot.hist_counts[i], snapshot.hist_range[i]
        )
        for i, layer in enumerate(snapshot.layers)
        if snapshot.reached[i]
    }
