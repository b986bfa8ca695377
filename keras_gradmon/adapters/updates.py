"""The update/weight ratio on TensorFlow: the weights before the inner
optimizer's update, held only on due steps, then the ratio measured from
the variables after it (`GradientMonitor.measure_updates`). On JAX the
adapter has both values already (`keras3_jax`).

Example:

>>> before = weights_before(monitor, due, variables, indices)  # doctest: +SKIP
>>> inner.apply(grads, variables)                              # doctest: +SKIP
>>> record_updates(monitor, due, before, variables, indices)   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from keras_gradmon.backend.tensorflow import values_if
from keras_gradmon.core.measurement import Due


def weights_before(
    monitor: Any, due: Due, variables: Sequence[Any], indices: Sequence[int]
) -> dict[int, Any] | None:
    """`{row: value}` of `variables` before the update where scalars are due
    (empty tensors elsewhere); None when no update ratio is recorded."""
    if not monitor.layout.updates or due.scalars is False:
        return None
    if due.scalars is True:
        held = [tf.identity(tf.convert_to_tensor(v)) for v in variables]
    else:
        held = values_if(due.scalars, list(variables))
    return dict(zip(indices, held))


def record_updates(
    monitor: Any,
    due: Due,
    before: dict[int, Any] | None,
    variables: Sequence[Any],
    indices: Sequence[int],
) -> None:
    """Measures the update from `before` to the variables' values now (read
    inside the due branch)."""
    if before is None:
        return
    monitor.measure_updates(due, before, dict(zip(indices, variables)))
