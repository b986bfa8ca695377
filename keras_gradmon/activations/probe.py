"""`ActivationProbe`: one compiled forward pass on a fixed batch that
measures the outputs of the watched layers, and the statistics it takes
(dead and saturated units among them).

A layer's output `y` has its units on the last axis (a Dense layer's units,
a convolution's channels); every other axis (batch, time, space) holds
samples of those units. Plain tensor math in `keras.ops`, the same on the
TensorFlow and JAX backends, XLA-safe.

`ActivationProbe`: one compiled forward pass on a fixed batch that measures
the outputs of the watched layers.

The measurement is `keras.ops`, the same on every backend; how the forward
pass is compiled and the outputs captured is the backend's
(`capture_backend`: `activations.capture` on TensorFlow,
`activations.capture_jax` on JAX), imported only there.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_gradmon.activations.layers import WatchedLayer, capture_outputs
from keras_gradmon.backend import Tensor, unconverted
from keras_gradmon.columns import tag
from keras_gradmon.core.batched import tensor_statistics
from keras_gradmon.core.histogram import bucket_counts
from keras_gradmon.histogram_rows import histogram_rows

#: Activations whose output saturates, and the values counted as saturated:
#: |tanh| >= 0.99 and sigmoid <= 0.01 or >= 0.99. There the derivative is
#: below 2% (tanh) and 4% (sigmoid) of its peak, so almost no gradient flows.
SATURATING = ("tanh", "sigmoid")
TANH_SATURATION = 0.99
SIGMOID_SATURATION = 0.01


def _units_last(y: Any) -> Tensor:
    """`y` as `[samples, units]`: every axis but the last one flattened."""
    y = ops.convert_to_tensor(y)
    if len(y.shape) == 0:
        return ops.reshape(y, [1, 1])
    # A dimension known only at run time is a tensor in `ops.shape`.
    return ops.reshape(y, [-1, ops.shape(y)[-1]])


def dead_units(y: Any) -> Tensor:
    """Which units output exactly zero for every sample (a boolean vector).

    Args:
        y: A layer's output, units on the last axis.

    Returns:
        A boolean `[units]` tensor; all False when `y` holds no samples.

    Example:

    >>> import numpy as np
    >>> np.asarray(dead_units(np.array([[0.0, 1.0], [0.0, 0.0]]))).tolist()
    [True, False]
    """
    samples = _units_last(y)
    has_samples = ops.shape(samples)[0] > 0
    return ops.logical_and(ops.all(ops.equal(samples, 0), axis=0), has_samples)


def exact_dead_fraction(mask: Any) -> float:
    """The fraction of dead units from a `dead_units` mask read back to the
    host, exactly (a float64 ratio; 0 for no units). A float32 ratio can
    round above itself (3/10 to 0.30000001), past a threshold equal to it,
    so the activation rules read this one.

    Example:

    >>> exact_dead_fraction([True, False, False, True, False, False, False,
    ...                      False, False, False]) > 0.2
    False
    """
    mask = np.asarray(mask, dtype=bool)
    return np.count_nonzero(mask) / mask.size if mask.size else 0.0


def dead_fraction(y: Any) -> Tensor:
    """The fraction of units whose output is exactly zero for every sample.

    Args:
        y: A layer's output, units on the last axis.

    Returns:
        A float32 scalar in [0, 1]; 0 when `y` holds no samples.

    Example:

    >>> import numpy as np
    >>> float(dead_fraction(np.array([[0.0, 1.0], [0.0, 0.0]])))
    0.5
    """
    return ops.mean(ops.cast(dead_units(y), "float32"))


def saturated_fraction(y: Any, activation: str) -> Tensor:
    """The fraction of a tanh or sigmoid layer's outputs in saturation.

    Counted over every output (each unit on each sample): a unit saturated
    for some samples passes almost no gradient for those samples.

    Args:
        y: A tanh or sigmoid layer's output.
        activation: "tanh" or "sigmoid".

    Returns:
        A float32 scalar in [0, 1]; 0 for an empty `y`.

    Example:

    >>> import numpy as np
    >>> float(saturated_fraction(np.array([0.995, 0.5, -0.999, 0.0]), "tanh"))
    0.5
    """
    if activation not in SATURATING:
        raise ValueError(
            f"`activation` must be one of {list(SATURATING)}. "
            f"Received: activation={activation!r}"
        )
    y = ops.cast(ops.reshape(ops.convert_to_tensor(y), [-1]), "float32")
    if activation == "tanh":
        saturated = ops.abs(y) >= TANH_SATURATION
    else:
        saturated = ops.logical_or(
            y <= SIGMOID_SATURATION, y >= 1.0 - SIGMOID_SATURATION
        )
    size = ops.cast(ops.size(y), "float32")
    return ops.divide_no_nan(ops.sum(ops.cast(saturated, "float32")), size)


#: The per-layer numbers, in column order. `saturated_fraction` is NaN for
#: layers that are not tanh or sigmoid.
ACTIVATION_STATISTICS: tuple[str, ...] = (
    "mean",
    "std",
    "min",
    "max",
    "zero_fraction",
    "nonfinite",
    "dead_fraction",
    "saturated_fraction",
)
_MOMENTS = ACTIVATION_STATISTICS[:6]
_DEAD = ACTIVATION_STATISTICS.index("dead_fraction")
#: The module that compiles the probe and captures the outputs, by backend.
_CAPTURE = {
    "tensorflow": "keras_gradmon.activations.capture",
    "jax": "keras_gradmon.activations.capture_jax",
}


def capture_backend() -> ModuleType:
    """The probe's module for the current Keras backend: `flatten`,
    `as_inputs` and `compile_probe`.

    Raises:
        NotImplementedError: On a backend other than TensorFlow or JAX.

    Example:

    >>> capture_backend().__name__  # doctest: +SKIP
    'keras_gradmon.activations.capture_jax'
    """
    name = keras.backend.backend()
    if name not in _CAPTURE:
        raise NotImplementedError(
            f"The activation probe runs on the backends {sorted(_CAPTURE)}. "
            f"Received: keras.backend.backend()={name!r}"
        )
    return importlib.import_module(_CAPTURE[name])


@dataclasses.dataclass(frozen=True)
class ActivationSnapshot:
    """The activation statistics of one probe, as NumPy data.

    Attributes:
        step: The training step the probe describes.
        layers: The watched layers' names, in row order.
        activations: The activation of each layer ("relu", "tanh", ...).
        stats: float64 `[num_layers, len(ACTIVATION_STATISTICS)]` (the dead
            fraction the exact ratio, the rest measured in float32); rows
            of layers the forward pass did not reach are NaN.
        reached: Boolean `[num_layers]`: whether the pass ran each layer.
        hist_counts: int `[num_layers, buckets]` bucket counts, or None.
        hist_range: `[num_layers, 2]` min and max of each layer's outputs,
            or None.
        samples: The number of probe samples (the window of `dead_fraction`).
        dead_units: `{layer: indices}` of the units (last axis) that output
            zero for every probe sample, for each reached layer.
    """

    step: int
    layers: tuple[str, ...]
    activations: tuple[str, ...]
    stats: np.ndarray
    reached: np.ndarray
    hist_counts: np.ndarray | None
    hist_range: np.ndarray | None
    samples: int
    dead_units: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def stat(self, name: str) -> dict[str, float]:
        """`{layer: value}` of one statistic, for the layers the pass reached.

        `saturated_fraction` lists only tanh and sigmoid layers.
        """
        column = self.stats[:, ACTIVATION_STATISTICS.index(name)]
        return {
            layer: float(value)
            for layer, value, reached, activation in zip(
                self.layers, column, self.reached, self.activations
            )
            if reached and (name != "saturated_fraction" or activation in SATURATING)
        }

    def scalar_values(self, scope: str | None = None) -> dict[str, float]:
        """`{tag: value}` of every activation scalar:
        `activation_<stat>/[<scope>/]<layer>`; layers the probe did not reach
        get none, and `saturated_fraction` is for tanh and sigmoid layers."""
        return {
            tag(f"activation_{name}", layer, scope): value
            for name in ACTIVATION_STATISTICS
            for layer, value in self.stat(name).items()
        }

    def histogram_values(self, scope: str | None = None) -> dict[str, np.ndarray]:
        """`{tag: [k, 3] rows}` of each reached layer's finite outputs, with
        readable edges (`histogram_rows.histogram_rows`), or {}."""
        if self.hist_counts is None:
            return {}
        return {
            tag("activation_hist", layer, scope): histogram_rows(
                self.hist_counts[i], self.hist_range[i]
            )
            for i, layer in enumerate(self.layers)
            if self.reached[i]
        }


def _merged(outputs: list[Tensor]) -> Tensor:
    """One tensor of a layer's outputs; a shared layer's calls side by side."""
    if len(outputs) == 1:
        return outputs[0]
    units = {o.shape[-1] for o in outputs}
    if len(units) != 1 or None in units:
        return outputs[0]
    width = units.pop()
    return ops.concatenate([ops.reshape(o, [-1, width]) for o in outputs], 0)


def _nan() -> Tensor:
    return ops.full([], float("nan"), "float32")


def _layer_statistics(y: Tensor, activation: str) -> Tensor:
    moments = tensor_statistics(y, _MOMENTS)
    saturation = (
        saturated_fraction(y, activation) if activation in SATURATING else _nan()
    )
    # The dead fraction is counted on the host (`measure`).
    return ops.stack(
        [ops.cast(moments[name], "float32") for name in _MOMENTS]
        + [_nan(), saturation]
    )


def sample_count(data: Any, flatten: Callable[[Any], list] = keras.tree.flatten) -> int:
    """The number of samples in a batch of model inputs (its leading axis);
    `flatten` gives the batch's leaves.

    Example:

    >>> sample_count({"x": np.zeros([5, 2])})
    5
    """
    first = flatten(data)[0]
    shape = getattr(first, "shape", None)
    shape = np.shape(first) if shape is None else shape
    try:
        dims = tuple(shape)
    except ValueError:  # TensorFlow: a shape of unknown rank
        dims = ()
    if not dims or dims[0] is None:
        raise ValueError(
            "`data` must be a batch of model inputs with a leading sample "
            f"axis. Received: data of shape {shape}"
        )
    return int(dims[0])


class ActivationProbe:
    """Runs the model on `data` and measures the watched layers' outputs.

    Inference mode (`training=False`): dropout off, batch normalization on
    its moving statistics, so the numbers describe the model as it stands,
    not one noisy training pass. One compiled function (`tf.function` on
    TensorFlow, `jax.jit` on JAX, where it runs on the model's live state,
    during `fit` too), traced once.

    Args:
        layers: The layers to watch (`select_layers`).
        forward: Runs the model on a batch (the probe batch is its only
            argument); `model(x, training=False)` in the usual case.
        data: The probe batch: what `forward` takes.
        buckets: Histogram buckets, or None for no histograms.
        model: The model whose variables `forward` reads (needed on JAX,
            where their values are passed in).

    Example:

    ```python
    probe = ActivationProbe(
        select_layers(model), lambda x: model(x), x_val[:256], 30, model=model)
    snapshot = probe.measure(step=0)
    ```
    """

    def __init__(
        self,
        layers: Sequence[WatchedLayer],
        forward: Callable[[Any], Any],
        data: Any,
        buckets: int | None,
        model: Any = None,
    ) -> None:
        backend = capture_backend()
        self.layers = list(layers)
        self.samples = sample_count(data, backend.flatten)
        self.data = backend.as_inputs(data)
        self.buckets = buckets
        self._forward = forward
        self._first = lambda outputs: backend.flatten(outputs)[0]
        self._function = backend.compile_probe(self._measure, model)

    def _measure(self, data: Any) -> dict[str, Any]:
        with capture_outputs([w.layer for w in self.layers], self._first) as outputs:
            self._forward(data)
        return self._statistics(outputs)

    @unconverted
    def _statistics(self, outputs: list[list[Any]]) -> dict[str, Any]:
        """The statistics of the captured outputs: the library's own code,
        which AutoGraph leaves as it is (plain tensor math: converting its
        hundred-odd functions cost seconds at every first trace), while the
        user's model in `_measure` is converted as usual."""
        missing = ops.full([len(ACTIVATION_STATISTICS)], float("nan"), "float32")
        rows, reached, dead, counts, ranges = [], [], [], [], []
        for watched, outs in zip(self.layers, outputs):
            reached.append(bool(outs))
            y = _merged(outs) if outs else None
            dead.append(dead_units(y) if outs else ops.zeros([0], "bool"))
            rows.append(
                _layer_statistics(y, watched.activation) if outs else missing
            )
            if self.buckets is not None:
                c, r = bucket_counts(y, self.buckets) if outs else self._no_counts()
                counts.append(c)
                ranges.append(r)
        result = {
            "stats": ops.stack(rows),
            "reached": ops.convert_to_tensor(reached),
            "dead": dead,
        }
        if self.buckets is not None:
            result["counts"] = ops.stack(counts)
            result["ranges"] = ops.stack(ranges)
        return result

    def _no_counts(self) -> tuple[Tensor, Tensor]:
        """The histogram of a layer the pass did not reach: all zeros."""
        return ops.zeros([self.buckets], "int32"), ops.zeros([2], "float32")

    def measure(self, step: int, state: Any = None) -> ActivationSnapshot:
        """Runs the probe now (one forward pass, one host read); on JAX on
        `state`, `(trainable_values, non_trainable_values)` in the order of
        the model's variables, when given (see `ActivationMonitor.update`).
        """
        result = self._function(self.data, state)
        values = {k: np.asarray(v) for k, v in result.items() if k != "dead"}
        stats = values["stats"].astype(np.float64)
        for row, (mask, reached) in enumerate(zip(result["dead"], values["reached"])):
            if reached:
                stats[row, _DEAD] = exact_dead_fraction(mask)
        names = tuple(w.name for w in self.layers)
        return ActivationSnapshot(
            step=int(step),
            layers=names,
            activations=tuple(w.activation for w in self.layers),
            stats=stats,
            reached=values["reached"],
            hist_counts=values.get("counts"),
            hist_range=values.get("ranges"),
            samples=self.samples,
            dead_units={
                name: np.flatnonzero(np.asarray(mask))
                for name, mask, reached in zip(names, result["dead"], values["reached"])
                if reached
            },
        )
