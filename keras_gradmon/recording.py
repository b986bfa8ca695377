"""What one summary step records, as pure functions of the state values:
the step's inputs, the one conditional around them, and the clip numbers.

`GradientMonitor.measure` builds on these: the state values go in, new
values come out (`backend.update_if` writes them), so the same code runs in
a TensorFlow graph and under `jax.jit`.

Example:

>>> either_of(Due(True, False))
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from keras import ops

from keras_gradmon import backend
from keras_gradmon.measurement import ClipOutcome, Due

_NAN = float("nan")


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What a summary step measures: the step, the gradients and weights by
    row, the clip outcome and the loss scale."""

    step: Any
    grads: dict[int, Any]
    weights: dict[int, Any] | None
    clip: ClipOutcome | None
    loss_scale: Any


def either_of(due: Due) -> Any:
    """The one conditional around a step's recording: the only gated kind,
    or either of two (a Python bool where no conditional is needed)."""
    scalars, histograms = due.scalars, due.histograms
    if scalars is True or histograms is True:
        return True
    if scalars is False:
        return histograms
    if histograms is False:
        return scalars
    return ops.logical_or(scalars, histograms)


def when(
    pred: Any,
    either: Any,
    fn: Callable[[Inputs, dict], dict],
    inputs: Inputs,
    values: dict,
) -> dict:
    """`fn(inputs, values)` where `pred` holds (inside the conditional on
    `either`: a `pred` that is `either` itself holds there), else `values`."""
    if pred is False:
        return values
    if pred is True or pred is either:
        return fn(inputs, values)
    return backend.cond(pred, lambda: fn(inputs, values), lambda: values)


def clip_totals(
    clip: ClipOutcome | None, values: dict, clipping: bool
) -> dict[str, Any]:
    """The clip numbers of a summary; resets the clip counters in
    `values`."""
    nan = ops.convert_to_tensor(_NAN)
    if clip is None:
        return dict.fromkeys(
            ("clip_pre_norm", "clip_post_norm", "clip_scale", "clip_fraction"),
            nan,
        )
    pre, post = clip.pre_norm, clip.post_norm
    scale = ops.where(ops.equal(pre, 0.0), 1.0, post / pre)
    fraction = nan
    if clipping:
        counts = ops.cast(values["clip_counts"], "float32")
        fraction = counts[1] / ops.maximum(counts[0], 1.0)
        values["clip_counts"] = ops.zeros_like(values["clip_counts"])
    return dict(
        clip_pre_norm=pre,
        clip_post_norm=post,
        clip_scale=scale,
        clip_fraction=fraction,
    )
