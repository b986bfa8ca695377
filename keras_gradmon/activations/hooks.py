"""Captures the outputs of chosen layers during one forward pass.

Keras 3 and tf_keras layers both run `self.call` from `__call__`, looked up
on the instance at every call. For the length of the `with` block each
chosen layer gets an instance attribute `call` that runs the original and
keeps its output; leaving the block deletes it again, so the layer is exactly
as before. Used while tracing a probe function (`tf.function` on
TensorFlow, `jax.jit` on JAX): the traced program holds the captured
outputs, and later runs of it involve no Python at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

#: Picks the output a structured layer output (an RNN's states) is measured
#: on: its first, in the framework's own flattening order.
FirstOutput = Callable[[Any], Any]


def _recording(original: Callable, sink: list, first: FirstOutput) -> Callable:
    def call(*args: Any, **kwargs: Any) -> Any:
        outputs = original(*args, **kwargs)
        sink.append(first(outputs))
        return outputs

    return call


@contextlib.contextmanager
def capture_outputs(
    layers: Sequence[Any], first: FirstOutput
) -> Iterator[list[list[Any]]]:
    """Records every output of each of `layers` while the block runs.

    Args:
        layers: The layers whose outputs to keep.
        first: Maps a layer's output (a tensor or a structure of tensors) to
            the one tensor kept.

    Yields:
        One list per layer, filled with that layer's outputs in call order
        (several when a layer is shared, none when the pass skips it).

    Example:

    >>> with capture_outputs([model.layers[0]], first) as outputs:  # doctest: +SKIP
    ...     model(x)
    >>> outputs[0][0].shape  # doctest: +SKIP
    TensorShape([32, 16])
    """
    outputs: list[list[Any]] = [[] for _ in layers]
    hooked = []
    try:
        for layer, sink in zip(layers, outputs):
            if "call" in vars(layer):
                raise ValueError(
                    f"Layer {layer.name!r} is already being captured (or has its "
                    "own `call` attribute); one probe at a time."
                )
            # object.__setattr__: Keras's own __setattr__ would track it.
            object.__setattr__(layer, "call", _recording(layer.call, sink, first))
            hooked.append(layer)
        yield outputs
    finally:
        for layer in hooked:
            object.__delattr__(layer, "call")
