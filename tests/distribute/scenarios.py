"""Training runs shared by the distributed tests: the same model, data and
steps with or without a strategy, returning every number the tests check.

Run inside a process whose devices are already configured (see
`runner.py`): a strategy of two logical CPUs, or one device.
"""

from __future__ import annotations

import contextlib
from typing import Any

import keras
import numpy as np
import tensorflow as tf

import keras_gradmon
from keras_gradmon.core.state import SKIPPED
from tests.helpers import LOSS, data, mlp

GLOBAL_BATCH = 16
EXAMPLES = 64  # 4 steps an epoch


def _scope(strategy: tf.distribute.Strategy | None) -> Any:
    return strategy.scope() if strategy else contextlib.nullcontext()


def _optimizer(options: dict | None, loss_scale: float | None) -> Any:
    optimizer = keras.optimizers.Adam(1e-2)
    if loss_scale is not None:
        optimizer = keras.optimizers.LossScaleOptimizer(
            optimizer, initial_scale=loss_scale
        )
    if options is not None:
        optimizer = keras_gradmon.GradientMonitorOptimizer(optimizer, **options)
    return optimizer


class _Recorder(keras.callbacks.Callback):
    """Weights before each step; the monitor's snapshot after it."""

    def __init__(self, optimizer: Any) -> None:
        super().__init__()
        self.optimizer = optimizer
        self.weights_before: list = []
        self.snapshots: list = []

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self.weights_before.append(self.model.get_weights())

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if hasattr(self.optimizer, "snapshot"):
            self.snapshots.append(self.optimizer.snapshot())


def fit_run(
    strategy: tf.distribute.Strategy | None,
    options: dict | None,
    log_dir: str | None = None,
    epochs: int = 1,
    loss_scale: float | None = None,
) -> dict:
    """`model.fit` of `tests.helpers.mlp` on `EXAMPLES` examples, global batch
    `GLOBAL_BATCH`, Adam(1e-2), wrapped in `GradientMonitorOptimizer(**options)`
    unless `options` is None; a `LossScaleOptimizer` inside with
    `loss_scale` (and `auto_scale_loss=False`)."""
    x, y = data(n=EXAMPLES)
    with _scope(strategy):
        model = mlp()
        optimizer = _optimizer(options, loss_scale)
        model.compile(optimizer=optimizer, loss=LOSS, auto_scale_loss=False)
    recorder = _Recorder(optimizer)
    callbacks: list = [recorder]
    if log_dir is not None:
        callbacks.append(keras_gradmon.GradientSummaryCallback(log_dir))
    model.fit(
        x,
        y,
        batch_size=GLOBAL_BATCH,
        epochs=epochs,
        shuffle=False,
        verbose=0,
        callbacks=callbacks,
    )
    histograms = (
        optimizer.histogram_snapshot() if hasattr(optimizer, "snapshot") else None
    )
    return {
        "weights_before": recorder.weights_before,
        "final": model.get_weights(),
        "snapshots": recorder.snapshots,
        "histograms": histograms,
        "iterations": int(optimizer.iterations.numpy()),
        "skipped": _skipped(optimizer),
        "replaced_left": _replaced_methods_left(optimizer),
    }


def _replaced_methods_left(optimizer: Any) -> bool:
    """Whether an optimizer in the chain still has the wrapper's replacement
    of `_all_reduce_sum_gradients` (it must be gone after each step)."""
    chain = [optimizer]
    while getattr(chain[-1], "inner_optimizer", None) is not None:
        chain.append(chain[-1].inner_optimizer)
    return any("_all_reduce_sum_gradients" in vars(o) for o in chain)


def _skipped(optimizer: Any) -> int:
    """The monitor's count of skipped steps now (the snapshot holds the
    count of the latest recorded step)."""
    monitor = getattr(optimizer, "monitor", None)
    return -1 if monitor is None else int(monitor.state.step_counts.numpy()[SKIPPED])


def _distributed(strategy: tf.distribute.Strategy, dataset: tf.data.Dataset) -> Any:
    """`dataset` split by data: each worker takes its part of every batch."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    return strategy.experimental_distribute_dataset(dataset.with_options(options))


def _loop_step(strategy: Any, model: Any, optimizer: Any, per_example: Any) -> Any:
    """The compiled step of `loop_run`: one global batch, NaN on the last
    replica's first gradient when `poison`."""

    def replica_step(xb: tf.Tensor, yb: tf.Tensor, poison: tf.Tensor) -> None:
        with tf.GradientTape() as tape:
            losses = per_example(yb, model(xb, training=True))
            loss = tf.nn.compute_average_loss(losses, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        context = tf.distribute.get_replica_context()
        last = context.num_replicas_in_sync - 1
        bad = tf.logical_and(poison, tf.equal(context.replica_id_in_sync_group, last))
        grads[0] = tf.where(bad, grads[0] * np.nan, grads[0])
        optimizer.apply(grads, model.trainable_variables)

    @tf.function
    def step(xb: Any, yb: Any, poison: tf.Tensor) -> None:
        if strategy is None:
            replica_step(xb, yb, poison)
        else:
            strategy.run(replica_step, args=(xb, yb, poison))

    return step


def loop_run(
    strategy: tf.distribute.Strategy | None,
    options: dict,
    poison_step: int | None = None,
    log_dir: str | None = None,
) -> dict:
    """A custom loop (`strategy.run`) over the same data and Adam(1e-2)
    in `GradientMonitorOptimizer(**options)`, the loss averaged over the
    global batch. At `poison_step` the last replica's first gradient is NaN
    (the only replica without a strategy). `write_summaries` after each step
    when `log_dir` is given."""
    x, y = data(n=EXAMPLES)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    per_example = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=None
    )
    with _scope(strategy):
        model = mlp()
        optimizer = _optimizer(options, None)
        optimizer.build(model.trainable_variables)
    if strategy is not None:
        dataset = _distributed(strategy, dataset)

    step = _loop_step(strategy, model, optimizer, per_example)
    weights_before, snapshots = [], []
    for i, (xb, yb) in enumerate(dataset):
        weights_before.append(model.get_weights())
        step(xb, yb, tf.constant(i == poison_step))
        snapshots.append(optimizer.snapshot())
        if log_dir is not None:
            keras_gradmon.write_summaries(optimizer, log_dir)
    return {
        "weights_before": weights_before,
        "final": model.get_weights(),
        "snapshots": snapshots,
        "iterations": int(optimizer.iterations.numpy()),
        "skipped": _skipped(optimizer),
        "replaced_left": _replaced_methods_left(optimizer),
    }
