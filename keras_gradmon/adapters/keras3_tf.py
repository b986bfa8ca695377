"""The Keras 3 adapter's step on TensorFlow: sum across replicas, clip,
decide the skip, measure, then the inner optimizer's own `apply` (gated
where a step may be skipped)."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from keras_gradmon.adapters import noise_parts
from keras_gradmon.adapters.keras3 import handed_on
from keras_gradmon.adapters.updates import record_updates, weights_before
from keras_gradmon.backend import distribute
from keras_gradmon.backend.tensorflow import exact_copies, in_xla_context
from keras_gradmon.core import loss_scale


def apply(wrapper: Any, grads: list, variables: list) -> None:
    """`wrapper.apply(grads, variables)` on TensorFlow (see
    `GradientMonitorOptimizer`)."""
    indices = [wrapper._get_variable_index(v) for v in variables]
    summed = distribute.all_reduce_sum(grads)
    monitor = wrapper.monitor
    with keras.name_scope(wrapper.name, caller=wrapper):
        handed_on, verdict, due = _monitored(wrapper, grads, summed, variables)
        before = weights_before(monitor, due, variables, indices)
    inner = wrapper.inner_optimizer
    with distribute.keras_reduction_disabled(inner):
        if verdict is True:
            inner.apply(handed_on, variables)
        else:
            distribute.apply_if(verdict, inner.apply, (handed_on, variables))
    with keras.name_scope(wrapper.name, caller=wrapper):
        record_updates(monitor, due, before, variables, indices)


def _monitored(
    wrapper: Any, grads: list, summed: list, variables: list
) -> tuple[list, Any, Any]:
    """`(gradients for the inner optimizer, whether to apply them, what was
    recorded)`, from this replica's `grads` and their cross-replica sum.

    The statistics are of the unscaled gradients when the inner
    optimizer scales the loss; a `LossScaleOptimizer` inside decides the
    skips itself, by its own test on exactly what it will be given.
    """
    inner, monitor = wrapper.inner_optimizer, wrapper.monitor
    indices = [wrapper._get_variable_index(v) for v in variables]
    scale = loss_scale.current_scale(inner)
    measured = loss_scale.unscale(_readable(wrapper, summed), scale)
    step = wrapper.iterations
    parts = _parts(wrapper, grads, variables, scale)
    if not loss_scale.is_loss_scaler(inner):
        done = monitor.process(step, measured, indices, parts=parts)
        given = handed_on(wrapper.monitor, summed, done.grads, scale)
        return given, done.apply, done.due
    outcome = monitor.clip(measured, indices)
    given = handed_on(wrapper.monitor, summed, outcome and outcome.grads, scale)
    scaler = loss_scale.will_apply(inner, given)
    applied, gate = monitor.decide(step, outcome, scaler=scaler, parts=parts)
    due = monitor.measure(step, measured, indices, outcome, applied, loss_scale=scale)
    return given, gate, due


def _parts(wrapper: Any, grads: list, variables: list, scale: Any) -> Any:
    """The noise scale's parts: the replicas, else the micro-batches."""
    if wrapper.monitor.signals.noise is None:
        return None
    count = distribute.replicas_in_sync()
    if count > 1:
        return noise_parts.replicas(grads, count, scale)
    return noise_parts.micro_batches(wrapper, variables)


def _readable(wrapper: Any, grads: list) -> list:
    """What the monitor reads: under XLA without clipping, exact copies
    of the gradients, so that XLA compiles the inner update as it would
    unwrapped, bit for bit (see `graph.exact_copies`)."""
    if wrapper.monitor.clip_rule is not None or not in_xla_context():
        return grads
    zero = tf.cast(tf.less(wrapper.inner_optimizer.iterations, 0), tf.int32)
    return exact_copies(grads, zero)
