"""Which layers of a model are watched, what activation each applies, and
how their outputs are captured during one forward pass.

Captures the outputs of chosen layers during one forward pass.

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
import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from keras_gradmon.naming import layer_prefix, unique_names, variable_path

#: Activation layers known by their class rather than an `activation` argument.
_ACTIVATION_LAYERS = {
    "ReLU": "relu",
    "LeakyReLU": "leaky_relu",
    "PReLU": "prelu",
    "ELU": "elu",
    "Softmax": "softmax",
}
#: Left out of the default selection: no activation, or an output layer's
#: probabilities, whose std says nothing about health.
_NOT_HIDDEN = ("", "linear", "softmax", "log_softmax")
#: Outputs that are zero for every sample mark a dead unit.
RELU_LIKE = ("relu", "relu6")
#: The activation name of a recurrent layer (LSTM, GRU, ...): its output is
#: a gated product, not one activation applied to a layer's sum.
RECURRENT = "recurrent"


@dataclasses.dataclass(frozen=True)
class WatchedLayer:
    """A layer whose outputs are measured.

    Attributes:
        name: The layer's path, its name in tags and alerts (`layer_path`:
            the prefix of its variables' paths, `sequential/dense`; made
            unique with `_1`, `_2` ... when two layers share one).
        layer: The Keras 3 or tf_keras layer.
        activation: The activation it applies ("relu", "tanh", ...), or ""
            when it applies none that is known.
    """

    name: str
    layer: Any
    activation: str


def activation_name(layer: Any) -> str:
    """The name of the activation `layer` applies, "" if none is known
    (`RECURRENT` for a recurrent layer).

    Example:

    >>> activation_name(keras.layers.Dense(4, activation="tanh"))  # doctest: +SKIP
    'tanh'
    """
    by_class = _ACTIVATION_LAYERS.get(type(layer).__name__)
    if by_class is not None:
        return by_class
    if hasattr(getattr(layer, "cell", None), "_flatten_layers"):
        return RECURRENT
    function = getattr(layer, "activation", None)
    if not callable(function):
        return ""
    return str(getattr(function, "__name__", type(function).__name__))


def model_layers(model: Any) -> list[Any]:
    """Every layer inside `model`, nested ones included, in tracking order.

    Input layers and the models themselves (which only route their layers)
    are left out. A recurrent layer (LSTM, GRU, ...) counts as one layer:
    its cell runs inside the loop over time steps, where its outputs cannot
    be read, so the cell is left out and the recurrent layer's output is
    what is measured.
    """
    loops = _loop_bodies(model)
    found = []
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if id(layer) in loops or type(layer).__name__ == "InputLayer":
            continue
        children = layer._flatten_layers(include_self=False, recursive=False)
        if any(id(child) not in loops for child in children):
            continue
        found.append(layer)
    return found


def layer_path(layer: Any, parents: dict[int, Any] | None = None) -> str:
    """The path of `layer` in the scheme of its variables' paths, so that
    its activation tags and its variables' tags share one prefix.

    A layer with variables: the prefix of their paths up to its name
    (`sequential/dense` for `sequential/dense/kernel`; Keras 3's
    `variable.path`, tf_keras's variable name without `:0`). A layer
    without: its parent's path and its name (`sequential/dropout`), the
    parent's path being Keras 3's record of where the layer was called,
    else the one its siblings' paths show (tf_keras), else the parent's
    own (`parents` maps a layer's id to the layer holding it, `layer_parents`).

    Example:

    >>> layer_path(model.get_layer("dense"))  # doctest: +SKIP
    'sequential/dense'
    """
    own = _own_path(layer)
    if own is not None:
        return own
    parent = _parent_path(layer, parents or {})
    return f"{parent}/{layer.name}" if parent else layer.name


def layer_parents(model: Any) -> dict[int, Any]:
    """`{id(layer): the layer or model holding it}` of every layer in
    `model`, nested ones included."""
    parents = {}
    for holder in model._flatten_layers(include_self=True, recursive=True):
        for child in holder._flatten_layers(include_self=False, recursive=False):
            parents.setdefault(id(child), holder)
    return parents


def _own_path(layer: Any) -> str | None:
    """The path `layer`'s variables show, else Keras 3's `layer.path` (set
    when it is built); None when neither is known."""
    own = layer_prefix([variable_path(v) for v in _weights(layer)], layer.name)
    if own is not None:
        return own
    path = getattr(layer, "path", None)
    return path if isinstance(path, str) and path else None


def _parent_path(layer: Any, parents: dict[int, Any]) -> str:
    """The path of the scope `layer` runs in ("" at the top)."""
    called_in = getattr(layer, "_parent_path", None)  # Keras 3, once called
    if isinstance(called_in, str):
        return called_in
    parent = parents.get(id(layer))
    if parent is None:
        return ""
    for sibling in parent._flatten_layers(include_self=False, recursive=False):
        path = _named_path(sibling)
        if path is not None:
            return path[: -len(sibling.name)].rstrip("/")
    if id(parent) in parents:
        return layer_path(parent, parents)
    # The model itself. Built, its variables show whether its layers ran in
    # its scope (Sequential, subclassed) or at the top (functional); not
    # built yet, they will run in its scope.
    if _weights(parent):
        return _named_path(parent) or ""
    return parent.name


def _weights(layer: Any) -> list[Any]:
    """`layer.weights`; none where tf_keras refuses (a model not built)."""
    try:
        return list(layer.weights)
    except ValueError:
        return []


def _named_path(layer: Any) -> str | None:
    """`_own_path` where it ends with the layer's name, else None."""
    path = _own_path(layer)
    return path if path is not None and path.split("/")[-1] == layer.name else None


def _loop_bodies(model: Any) -> set[int]:
    """The ids of the layers a recurrent layer calls inside its loop: its
    `cell` and the cell's own layers (stacked cells)."""
    bodies: set[int] = set()
    for layer in model._flatten_layers(include_self=False, recursive=True):
        cell = getattr(layer, "cell", None)
        if cell is not None and hasattr(cell, "_flatten_layers"):
            inside = cell._flatten_layers(include_self=True, recursive=True)
            bodies.update(id(sublayer) for sublayer in inside)
    return bodies


def check_layers_argument(layers: object) -> re.Pattern[str] | None:
    """Checks the `layers` argument without the model: None, a valid regex
    (returned compiled) or a list of names (None returned).

    Example:

    >>> check_layers_argument("dense_[0-9]").pattern
    'dense_[0-9]'
    """
    if layers is None:
        return None
    if isinstance(layers, str):
        try:
            return re.compile(layers)
        except re.error as error:
            raise ValueError(
                f"`layers` is not a valid regular expression ({error}). "
                f"Received: layers={layers!r}"
            ) from None
    if not isinstance(layers, Sequence) or not all(isinstance(n, str) for n in layers):
        raise ValueError(
            "`layers` must be None, a regex string or a list of layer names. "
            f"Received: layers={layers!r}"
        )
    return None


def select_layers(
    model: Any, layers: str | Sequence[str] | None = None
) -> list[WatchedLayer]:
    """The layers of `model` to watch.

    Args:
        model: A Keras 3 or tf_keras model or network (Sequential,
            functional, subclassed, a tf-agents network).
        layers: None for every layer with a hidden-layer activation (any
            but linear and softmax); a list of layer paths
            (`sequential/hidden`) or names (`hidden`, where one layer has
            it); or a regex, matched with `re.search` against each path
            and each name.

    Raises:
        ValueError: A name that is not a layer of `model` (or is the name
            of several), a regex that matches none, or a model without an
            activation layer; the message lists the model's layer paths.

    Example:

    >>> [w.name for w in select_layers(model, ["hidden"])]  # doctest: +SKIP
    ['sequential/hidden']
    """
    candidates = model_layers(model)
    parents = layer_parents(model)
    names = unique_names([layer_path(layer, parents) for layer in candidates])
    watched = [
        WatchedLayer(name, layer, activation_name(layer))
        for name, layer in zip(names, candidates)
    ]
    if layers is None:
        chosen = [w for w in watched if w.activation not in _NOT_HIDDEN]
        if not chosen:
            raise ValueError(
                "`layers` is None and the model has no layer with a hidden "
                "activation (relu, tanh, ...) to watch. Pass layer paths or names. "
                f"The model's layers: {names}"
            )
        return chosen
    pattern = check_layers_argument(layers)
    if pattern is not None:
        return _matched(watched, pattern, layers, names)
    return _named(watched, layers, names)


def _matched(
    watched: list[WatchedLayer], pattern: Any, layers: Any, names: list[str]
) -> list[WatchedLayer]:
    """The layers whose path or name `pattern` (the regex `layers`) finds."""
    chosen = [
        w for w in watched if pattern.search(w.name) or pattern.search(w.layer.name)
    ]
    if not chosen:
        raise ValueError(
            f"`layers` matches no layer of the model. Received: "
            f"layers={layers!r}. The model's layers: {names}"
        )
    return chosen


def _named(
    watched: list[WatchedLayer], layers: Sequence[str], names: list[str]
) -> list[WatchedLayer]:
    """The watched layers named in `layers` by path or by a name that one
    layer has; an unknown or shared name is an error."""
    by_name: dict[str, list[WatchedLayer]] = {}
    for w in watched:
        by_name.setdefault(w.layer.name, []).append(w)
    by_name = {n: found[0] for n, found in by_name.items() if len(found) == 1}
    by_name.update({w.name: w for w in watched})
    unknown = [n for n in layers if n not in by_name]
    if unknown or not layers:
        raise ValueError(
            f"`layers` names {'no layer' if not layers else unknown} of the "
            "model (a name must be a layer's path, or the name of one layer). "
            f"Received: layers={list(layers)!r}. "
            f"The model's layers: {names}"
        )
    return [by_name[n] for n in dict.fromkeys(layers)]


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
