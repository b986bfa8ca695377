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
| `grad_hist/<variable path>`           | gradient histogram                      |
| `weight_hist/<variable path>`         | weight histogram                        |

With `tag_scope="actor"` every tag becomes `<statistic>/actor/<subject>`.
"""

from __future__ import annotations

import math

import numpy as np

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


def scalar_summaries(snapshot: Snapshot, config: MonitorConfig) -> dict[str, float]:
    """`{tag: value}` of every scalar to write for `snapshot`."""
    scope = config.tag_scope
    totals = snapshot.totals
    out = {
        tag("grad_norm", GLOBAL, scope): totals["grad_norm"],
        tag("grad_nonfinite", GLOBAL, scope): totals["grad_nonfinite"],
        tag("grad_missing", GLOBAL, scope): totals["grad_missing"],
    }
    if config.clip_rule is not None:
        pre, post = totals["clip_pre_norm"], totals["clip_post_norm"]
        out[tag("clip", "pre_norm", scope)] = pre
        out[tag("clip", "post_norm", scope)] = post
        out[tag("clip", "scale", scope)] = 1.0 if pre == 0 else post / pre
        out[tag("clip", "fraction", scope)] = totals["clip_fraction"]
    if config.skip_nonfinite:
        out[tag("skipped", "steps", scope)] = totals["skipped_steps"]
    weights = snapshot.weight is not None
    if weights:
        out[tag("weight_norm", GLOBAL, scope)] = totals["weight_norm"]
    for i, group in enumerate(snapshot.groups):
        out[tag("grad_norm", group, scope)] = float(snapshot.group_grad_norm[i])
        if weights:
            out[tag("weight_norm", group, scope)] = float(snapshot.group_weight_norm[i])
    if not config.per_variable:
        return out
    columns = [COLUMNS.index(name) for name in config.statistics]
    norm = COLUMNS.index("norm")
    for i, path in enumerate(snapshot.paths):
        if snapshot.has_grad[i]:
            for name, column in zip(config.statistics, columns):
                out[tag(f"grad_{name}", path, scope)] = float(snapshot.grad[i, column])
        if not weights:
            continue
        for name, column in zip(config.statistics, columns):
            out[tag(f"weight_{name}", path, scope)] = float(snapshot.weight[i, column])
        weight_norm = float(snapshot.weight[i, norm])
        if snapshot.has_grad[i] and weight_norm > 0:
            ratio = float(snapshot.grad[i, norm]) / weight_norm
            out[tag("grad_to_weight", path, scope)] = ratio
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
