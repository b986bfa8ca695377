"""`ActivationMonitor`: measures the watched layers every N steps, writes the
numbers to TensorBoard and runs the activation health rules; and its
`ActivationOptions`, checked without the model (so a callback fails at
construction, not at `fit`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from keras_gradmon import defaults, validation
from keras_gradmon.activations.layers import (
    RECURRENT,
    WatchedLayer,
    check_layers_argument,
    select_layers,
)
from keras_gradmon.activations.probe import (
    ActivationProbe,
    ActivationSnapshot,
)
from keras_gradmon.alerts.activity import (
    ACTIVATION_NONFINITE,
    ACTIVATION_STD,
    DEAD_FRACTION,
)
from keras_gradmon.alerts.defaults import default_activation_rules
from keras_gradmon.alerts.delivery import (
    AlertDelivery,
    AlertOptions,
    AlertRunner,
)
from keras_gradmon.alerts.engine import AlertEngine
from keras_gradmon.alerts.events import Alert
from keras_gradmon.hub import ACTIVATIONS, Hub, Publication, chief_writes
from keras_gradmon.recorders.tensorboard import recording_hub
from keras_gradmon.schedule import Frequency, Schedule


@dataclasses.dataclass(frozen=True)
class ActivationOptions(AlertOptions):
    """The options of `ActivationMonitor` and `ActivationMonitorCallback`
    (see `ActivationMonitor` for each), validated at construction.

    Example:

    ```python
    options = ActivationOptions(data=x_val[:256], every_n_steps=50)
    monitor = ActivationMonitor(model, options, log_dir="logs")
    ActivationOptions(data=x_val[:256], every_n_steps=0)  # ValueError
    ActivationOptions(data=x_val[:256], fold_steps=0)  # ValueError
    ```
    """

    SECTION: ClassVar[str] = "activations"

    data: Any = None
    layers: str | Sequence[str] | None = None
    every_n_steps: Frequency = defaults.ACTIVATION_EVERY_N_STEPS
    histogram_buckets: int | None = defaults.ACTIVATION_HISTOGRAM_BUCKETS
    std_band: tuple[float, float] | None = None
    dead_fraction: float | None = None
    log_dir: str | None = None
    writer: Any = None
    tag_scope: str | None = None

    def __post_init__(self) -> None:
        if self.data is None:
            raise ValueError(
                "`data` must be a batch of model inputs to probe the layers "
                "with (e.g. x_val[:256]). Received: data=None"
            )
        super().__post_init__()
        check_layers_argument(self.layers)
        if self.histogram_buckets is not None:
            validation.positive_int("histogram_buckets", self.histogram_buckets)
        if self.tag_scope is not None:
            validation.non_empty_string("tag_scope", self.tag_scope)
        self.schedule()
        self.alerting()

    @classmethod
    def of(cls, options: Any, overrides: Mapping[str, Any], owner: str) -> Any:
        """Deprecated (0.2's spelling): `activation_options(owner, options,
        **overrides)`, `options` the probe batch or an `ActivationOptions`.

        Example:

        >>> ActivationOptions.of(x, {"every_n_steps": 10}, "m")  # doctest: +SKIP
        """
        warnings.warn(
            "ActivationOptions.of(options, overrides, owner) is deprecated and "
            "will be removed in the next release; use ActivationOptions.build("
            "config, alerts, owner, data=..., **options).",
            DeprecationWarning,
            stacklevel=2,
        )
        if isinstance(options, cls):
            return cls.build(options, None, owner, **overrides)
        return activation_options(owner, options, None, None, **overrides)

    def schedule(self) -> Schedule:
        """When to measure (validates `every_n_steps`)."""
        return Schedule(self.every_n_steps)

    def default_rules(self) -> Any:
        """The rules of `rules=None`: the activation defaults (each layer
        against its own recent level), and the fixed `std_band` and
        `dead_fraction` when given."""
        return default_activation_rules(self.std_band, self.dead_fraction)

    def alerting(self, hub: Hub | None = None) -> tuple[AlertEngine, AlertDelivery]:
        """The alert engine and delivery (validates the alert options); the
        flags go to `hub`, else to `log_dir` / `writer`."""
        if hub is None:
            delivery = self.delivery(log_dir=self.log_dir, writer=self.writer)
        else:
            delivery = self.delivery(hub)
        delivery.tag_scope = self.tag_scope
        return self.engine(), delivery


def activation_options(
    owner: str,
    data: Any = None,
    config: Any = None,
    alerts: Any = None,
    /,
    **options: Any,
) -> ActivationOptions:
    """The options an activation monitor (or its callback) is given: the
    probe batch `data`, `config` (an `ActivationOptions`, a dict of its
    fields, or a config file's path: its `activations` section), keyword
    `options` on top, and `alerts` (`AlertOptions`). The older spellings,
    an `ActivationOptions` in place of `data` and `options=`, still work,
    with a `DeprecationWarning`.

    Example:

    >>> activation_options("m", x, every_n_steps=10).every_n_steps  # doctest: +SKIP
    10
    """
    if isinstance(data, ActivationOptions) or "options" in options:
        positional = isinstance(data, ActivationOptions)
        given = data if positional else options.pop("options")
        data = None if positional else data
        spelling = "ActivationOptions(...)" if positional else "options=..."
        warnings.warn(
            f"{owner}({spelling}) is deprecated and will be removed in the "
            f"next release; pass the options as {owner}(data, config=...).",
            DeprecationWarning,
            stacklevel=3,
        )
        if config is not None:
            raise ValueError(f"{owner} got both `config` and `options`: pass one.")
        config = given
    if data is not None:
        if "data" in options:
            raise ValueError(
                f"{owner} got the probe batch twice: as its first argument "
                "and as `data=`. Pass one."
            )
        options["data"] = data
    return ActivationOptions.build(config, alerts, owner, **options)


#: When to measure: every N steps, or a callable from the step (an int64
#: scalar tensor, evaluated eagerly on the host) to a boolean.
HostFrequency = Frequency


def _writes_summaries(model: Any) -> bool:
    """False on the non-chief workers of a multi-worker strategy."""
    weights = getattr(model, "weights", None) or []
    return chief_writes(weights[0]) if weights else True


#: The layers the std band says nothing about: outputs confined to [0, 1]
#: have a std of at most 0.5 (saturation says more), and a recurrent
#: layer's gated output starts near 0 by design (a fresh LSTM's std is
#: about 0.04, its cell state starting at 0 and its gates at 0.5).
_NO_BAND = ("sigmoid", "hard_sigmoid", "softmax", RECURRENT)


def activation_metrics(snapshot: ActivationSnapshot) -> dict[str, dict[str, float]]:
    """The numbers the activation rules read, per layer: the std (of layers
    whose outputs are neither confined to [0, 1] nor recurrent), the dead
    fraction and the count of non-finite outputs."""
    bounded = {
        layer
        for layer, activation in zip(snapshot.layers, snapshot.activations)
        if activation in _NO_BAND
    }
    stds = {k: v for k, v in snapshot.stat("std").items() if k not in bounded}
    return {
        ACTIVATION_STD: stds,
        DEAD_FRACTION: snapshot.stat("dead_fraction"),
        ACTIVATION_NONFINITE: snapshot.stat("nonfinite"),
    }


class ActivationMonitor:
    """Watches the activations of a model's layers on a fixed probe batch.

    Every `every_n_steps` steps it runs the model once on `data` in
    inference mode, with the watched layers' outputs captured inside one
    compiled function, and records per layer: mean, std, min, max, fraction
    of zeros, number of NaN/Inf, the fraction of dead units (units whose
    output is zero for every probe sample) and, for tanh and sigmoid, the
    fraction of saturated outputs, plus a histogram. The train step itself
    is never touched: steps between probes cost nothing.

    The activation rules (`default_activation_rules`: a layer's live units
    dying at once, its std collapsing, each against the layer's own recent
    level) raise alerts through the same delivery as gradient alerts: a log line, an
    `alerts/<rule>` flag, JSON Lines and the tier's action.

    The numbers are published to a `keras_gradmon.hub.Hub` (source
    "activations"): its own, writing to `log_dir` / `writer`, or `hub`,
    shared with other monitors. The options come as an `ActivationOptions`
    (`config`) or, one by one, as keyword arguments (its fields, listed
    below), and the alert options as `alerts` (`AlertOptions`).

    Args:
        model: A Keras 3 or tf_keras model or tf-agents network.
        data: The probe batch (see `data` below).
        config: An `ActivationOptions`, a dict of its fields, or a config
            file's path (its `activations` section).
        alerts: An `AlertOptions` (or a dict of its fields), False for no
            alerts; the alert options below one by one are the same.
        forward: Runs the model on the probe batch; default
            `model(data, training=False)`.
        hub: Publish to this hub instead of one of the monitor's own (then
            without `log_dir` / `writer`).
        **options: Options, replacing those of `config`:

        data: The probe batch, as `model` takes it (a few hundred samples of
            held-out inputs; its size is the window of the dead-unit count).
        layers: None for every layer with a hidden activation (not linear
            or softmax); a list of layer names; or a regex on the names.
        every_n_steps: Measure on steps 0, N, 2N, ...; or a callable from
            the step to a bool.
        histogram_buckets: Buckets of the activation histograms; None for
            none.
        std_band: A fixed healthy `(low, high)` band of each layer's
            activation std to warn outside of (sigmoid and softmax layers,
            whose std cannot exceed 0.5, and recurrent layers are left
            out); None (the default) for none: the default rules judge
            each layer against its own recent level (see
            `default_activation_rules`). Ignored when `rules` is given.
        dead_fraction: A fixed fraction of dead units in a layer to warn
            above; None (the default) for none. Ignored when `rules` is
            given.
        rules: Alert rules by name (reading the metrics
            "activation_std" and "activation_dead_fraction"), instead of
            the defaults; `{}` for none.
        actions: `{tier: action}`, as for `AlertOptions`.
        log_dir: Directory of the event file; or `writer`, an existing
            `tf.summary` writer. Neither: nothing is written.
        jsonl_path: Append each alert as one JSON line to this file.
        cooldown_steps: Do not repeat an alert (rule, tier, layer) within
            this many steps.
        max_per_rule: At most this many alerts per rule and tier.
        tag_scope: Inserted after the statistic in every tag.
        fold_steps: The console groups the alerts of one (rule, layer,
            tier) into an incident: the first in full, repeats folded into
            one line after `fold_steps` steps (then 2x, 4x, ... as many),
            one line when it ends (quiet for `fold_steps` steps); None logs
            every alert in full. The alerts themselves are all kept (see
            `keras_gradmon.alerts.incidents.IncidentLog`).

    Example:

    ```python
    monitor = keras_gradmon.ActivationMonitor(
        agent._q_network, observations, every_n_steps=100, log_dir="logs")
    for experience in dataset:
        agent.train(experience)
        monitor.update(agent.train_step_counter)
    ```
    """

    def __init__(
        self,
        model: Any,
        data: Any = None,
        /,
        *,
        config: ActivationOptions | Mapping[str, Any] | str | None = None,
        alerts: AlertOptions | Mapping[str, Any] | bool | None = None,
        forward: Callable[[Any], Any] | None = None,
        hub: Hub | None = None,
        **options: Any,
    ) -> None:
        options = activation_options(
            "ActivationMonitor", data, config, alerts, **options
        )
        self.options = options
        self.every_n_steps = options.every_n_steps
        self.schedule = options.schedule()
        self.tag_scope = options.tag_scope
        self.watched: list[WatchedLayer] = select_layers(model, options.layers)
        if forward is None:

            def forward(batch: Any) -> Any:
                return model(batch, training=False)

        self.probe = ActivationProbe(
            self.watched,
            forward,
            options.data,
            options.histogram_buckets,
            model=model,
        )
        self._owns_hub = hub is None
        self.hub = recording_hub(options.log_dir, options.writer, hub)
        self.engine, self.delivery = options.alerting(self.hub)
        self.delivery.writes = lambda: _writes_summaries(model)
        self.hub.subscribe(AlertRunner(self.engine, self.delivery), origin=self)
        #: The most recent measurement, or None.
        self.latest: ActivationSnapshot | None = None

    @property
    def layer_names(self) -> list[str]:
        """The watched layers, as named in tags and alerts."""
        return [w.name for w in self.watched]

    @property
    def alerts(self) -> list[Alert]:
        """Every activation alert so far, in order."""
        return self.engine.history

    @property
    def stop_requested(self) -> bool:
        """Whether an alert with the "stop" action has fired."""
        return self.delivery.stop_requested

    def due(self, step: int) -> bool:
        """Whether `step` is a measuring step (and not measured yet)."""
        step = int(step)
        if self.latest is not None and self.latest.step == step:
            return False
        return self.schedule.due(step)

    def update(self, step: Any, state: Any = None) -> ActivationSnapshot | None:
        """Measures if `step` (an int or an integer tensor/variable) is due.

        Args:
            step: The training step.
            state: JAX only: `(trainable_values, non_trainable_values)`, the
                model's state where a hand-written `jax.jit` loop keeps it
                (lists in the order of `model.trainable_variables` and
                `model.non_trainable_variables`); None to read the
                variables (or, in `fit`, the trainer's live state).

        Returns:
            The new snapshot, or None when the step is not due.

        Raises:
            GradientAlertError: When an alert's tier has the "raise" action.
        """
        step = int(step)
        return self.record(step, state) if self.due(step) else None

    def record(self, step: Any, state: Any = None) -> ActivationSnapshot:
        """Measures now (on `state`, as for `update`), writes the numbers and
        runs the rules.

        Raises:
            GradientAlertError: When an alert's tier has the "raise" action.
        """
        snapshot = self.probe.measure(int(step), state)
        self.latest = snapshot
        # Publishes the numbers to the recorders and the metrics to the
        # alert runner (which publishes its flags through the same hub).
        self.hub.publish(self._publication(snapshot))
        return snapshot

    def _publication(self, snapshot: ActivationSnapshot) -> Publication:
        record = bool(self.hub.recorders) and self.delivery.writes()
        scope = self.tag_scope
        return Publication(
            snapshot.step,
            ACTIVATIONS,
            scalars=snapshot.scalar_values(scope) if record else {},
            histograms=snapshot.histogram_values(scope) if record else {},
            metrics=activation_metrics(snapshot),
            origin=self,
            record=record,
        )

    def flush(self) -> None:
        """Flushes the hub's recorders."""
        self.hub.flush()

    def close(self) -> None:
        """Closes the event file (a later measurement reopens it); a shared
        hub is flushed, and closed by its owner."""
        self.delivery.incidents.finish()
        if self._owns_hub:
            self.hub.close()
        else:
            self.hub.flush()
