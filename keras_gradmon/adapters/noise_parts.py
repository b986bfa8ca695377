"""How a Keras 3 wrapper's step splits into parts for the noise scale
(`keras_gradmon.core.noise_scale`): the replicas under `tf.distribute`, else
the micro-batches of the inner optimizer's `gradient_accumulation_steps`,
else none (no estimate: one batch gives one gradient).

Example:

>>> parts = micro_batches(wrapper, variables)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from keras import ops

from keras_gradmon import backend
from keras_gradmon.adapters.live_state import step_counter
from keras_gradmon.core.noise_scale import MicroBatches, Replicas


def micro_batches(
    wrapper: Any, variables: Sequence[Any], of: Callable[[Any], Any] | None = None
) -> MicroBatches | None:
    """The micro-batches of the inner optimizer's gradient accumulation, for
    the gradients of `variables` (in that order); None when the noise scale
    is off or the inner optimizer does not accumulate. `of` maps an inner
    variable to its value (JAX's `stateless_apply`)."""
    inner = wrapper.inner_optimizer
    k = getattr(inner, "gradient_accumulation_steps", None)
    if wrapper.monitor.signals.noise is None or not k:
        return None
    read = of or ops.convert_to_tensor
    stores = inner._accumulated_gradients
    accumulators = [stores[inner._get_variable_index(v)] for v in variables]

    def mean_sq(grads: list) -> Any:
        total = ops.zeros((), "float32")
        for accumulator, grad in zip(accumulators, grads):
            grad = ops.cast(backend.densify(grad), "float32")
            mean = (ops.cast(read(accumulator), "float32") + grad) / float(k)
            total = total + ops.sum(ops.square(mean))
        return total

    # The micro-step count (`iterations` counts updates when accumulating).
    counter, _ = step_counter(inner)
    micro_step = ops.cast(read(counter), backend.step_dtype())
    completes = ops.equal(ops.mod(micro_step + 1, k), 0)
    return MicroBatches(int(k), completes, mean_sq)


def replicas(grads: Sequence[Any], count: int, scale: Any) -> Replicas:
    """The `count` replicas' parts, from this replica's `grads` (called in
    the replica context, before they are summed; `scale`: the loss scale
    they carry, or None). A replica's part is its gradient times `count`,
    so that the parts' mean is the summed gradient."""
    from keras_gradmon.backend import distribute

    local = ops.zeros((), "float32")
    for grad in grads:
        if grad is not None:
            grad = ops.cast(backend.densify(grad), "float32")
            local = local + ops.sum(ops.square(grad))
    if scale is not None:
        local = local / ops.square(ops.cast(scale, "float32"))
    [total] = distribute.all_reduce_sum([local])
    return Replicas(count, total * float(count))
