"""The monitor under `tf.distribute`: which gradients it sees, where its
numbers live, and who writes them.

Under a multi-replica strategy (MirroredStrategy, MultiWorkerMirroredStrategy)
the optimizer's `apply` runs once per replica with that replica's *local*
gradient; the sum that is actually applied is formed inside the optimizer
(Keras 3: in `_backend_update_step`; tf_keras: in `aggregate_gradients`). The
wrappers therefore sum the gradients across replicas themselves, first, with
one all-reduce, measure and clip that sum, and hand it to the inner optimizer
with its own all-reduce switched off: the same single all-reduce an
unwrapped optimizer does, so the weights stay those of the unwrapped run.

The monitor's variables are `ON_READ` with `ONLY_FIRST_REPLICA` aggregation:
each replica writes its own copy without synchronizing (every replica
computes the same numbers from the same summed gradient), and a read outside
the replicas returns the first copy.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import tensorflow as tf

#: Synchronization and aggregation of every monitor variable.
SYNCHRONIZATION = tf.VariableSynchronization.ON_READ
AGGREGATION = tf.VariableAggregation.ONLY_FIRST_REPLICA


def replicas_in_sync() -> int:
    """How many replicas compute gradients together at this point of a trace.

    1 outside any strategy, in a cross-replica context, and under the
    default strategy.
    """
    context = tf.distribute.get_replica_context()
    return 1 if context is None else int(context.num_replicas_in_sync)


def all_reduce_sum(grads: Sequence[Any]) -> list[Any]:
    """Sums `grads` (None kept in place) across the replicas in sync.

    Must be called in the replica context of every replica (it is a
    synchronization point) and never inside a conditional. Outside a
    multi-replica context it returns the gradients as they are.

    Example:

    ```python
    def replica_step(x):  # run by strategy.run
        grads = tape.gradient(loss, variables)
        summed = all_reduce_sum(grads)  # the same on every replica
    ```
    """
    grads = list(grads)
    if replicas_in_sync() == 1:
        return grads
    present = [g for g in grads if g is not None]
    if not present:
        return grads
    reduced = iter(
        tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, present
        )
    )
    return [None if g is None else next(reduced) for g in grads]


def _synchronizes_by_merge_call() -> bool:
    """Whether cross-replica work here goes through `merge_call` (which may
    not sit inside a conditional of the replica function)."""
    if replicas_in_sync() == 1:
        return False
    return not tf.__internal__.distribute.strategy_supports_no_merge_call()


def apply_if(
    pred: tf.Tensor, apply_fn: Callable[..., Any], args: Sequence[Any]
) -> None:
    """Calls `apply_fn(*args)` where `pred` holds, `pred` the same on every
    replica (it is computed from summed gradients).

    An optimizer's `apply` synchronizes the replicas; where the strategy does
    that with `merge_call` (MirroredStrategy off XLA, multi-worker on CPU),
    TensorFlow forbids it inside a conditional of the replica function, so
    the conditional is built in the cross-replica context and calls the
    replicas from its taken branch, as Keras's `LossScaleOptimizer` does.
    `args` travel per replica (each replica gets its own tensors back).
    """
    if not _synchronizes_by_merge_call():

        def taken() -> tf.Tensor:
            apply_fn(*args)
            return tf.constant(True)

        tf.cond(pred, taken, lambda: tf.constant(False))
        return

    def cross_replica(distribution: Any, pred: Any, *args: Any) -> None:
        # Every replica computed the same `pred`: take the first one's.
        first = distribution.experimental_local_results(pred)[0]

        def taken() -> tf.Tensor:
            distribution.extended.call_for_each_replica(apply_fn, args=args)
            return tf.constant(True)

        tf.cond(first, taken, lambda: tf.constant(False))

    tf.distribute.get_replica_context().merge_call(cross_replica, args=(pred, *args))


# Keras 3 ----------------------------------------------------------------------

_lock = threading.Lock()
_disabled: dict[int, int] = {}


def _keras_update_optimizers(optimizer: Any) -> list[Any]:
    """`optimizer` and every optimizer it wraps (`inner_optimizer`, and the
    `optimizers` of a `MultiOptimizer`)."""
    found, pending = [], [optimizer]
    while pending:
        current = pending.pop()
        if current is None or any(current is f for f in found):
            continue
        found.append(current)
        pending.append(getattr(current, "inner_optimizer", None))
        pending.extend(getattr(current, "optimizers", None) or [])
    return found


def _pass_through(grads_and_vars: Any) -> list:
    return list(grads_and_vars)


@contextlib.contextmanager
def keras_reduction_disabled(optimizer: Any) -> Iterator[None]:
    """Within, the Keras 3 optimizers in `optimizer` apply the gradients they
    are given without summing them across replicas again.

    Keras 3's TensorFlow optimizers sum the replicas' gradients in
    `_all_reduce_sum_gradients`, called from `_backend_update_step`; Keras
    offers no argument to say that gradients are summed already (tf_keras
    has `skip_gradients_aggregation`). The method is replaced on the
    instances, for as long as the block runs (replica threads nest, so it
    counts), by one that returns the pairs as given. Outside a
    multi-replica context it changes nothing.
    """
    if replicas_in_sync() == 1:
        yield
        return
    targets = _keras_update_optimizers(optimizer)
    for target in targets:
        if not hasattr(target, "_all_reduce_sum_gradients"):
            import keras

            # Summing twice would scale every update by the replica count.
            raise RuntimeError(
                f"Cannot apply already-summed gradients with {target!r} under "
                "tf.distribute: this Keras version has no "
                "`_all_reduce_sum_gradients` on its optimizers (known: Keras "
                f"3.15). Received: keras {keras.__version__}"
            )
    with _lock:
        for target in targets:
            count = _disabled.get(id(target), 0)
            if count == 0:
                target._all_reduce_sum_gradients = _pass_through
            _disabled[id(target)] = count + 1
    try:
        yield
    finally:
        with _lock:
            for target in targets:
                _disabled[id(target)] -= 1
                if _disabled[id(target)] == 0:
                    del _disabled[id(target)]
                    del target._all_reduce_sum_gradients


# Host side ----------------------------------------------------------------------


def variable_strategy(variable: Any) -> tf.distribute.Strategy | None:
    """The strategy a (Keras or TF) variable was created under, or None."""
    variable = getattr(variable, "value", variable)  # a Keras 3 Variable
    strategy = getattr(variable, "distribute_strategy", None)
    return strategy if isinstance(strategy, tf.distribute.Strategy) else None


def _keras_backend() -> str | None:
    keras = sys.modules.get("keras")
    return None if keras is None else keras.backend.backend()


def writes_summaries(variable: Any) -> bool:
    """Whether this process writes the summaries of a monitor holding
    `variable`: always, except on the non-chief workers of a multi-worker
    strategy (`strategy.extended.should_save_summary`).

    Example:

    >>> writes_summaries(tf.Variable(0.0))
    True
    """
    if not isinstance(variable, tf.Variable) and _keras_backend() != "tensorflow":
        return True  # a variable of another backend: no strategy holds it
    strategy = variable_strategy(variable)
    return strategy is None or bool(strategy.extended.should_save_summary)
