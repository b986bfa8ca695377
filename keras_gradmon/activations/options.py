"""`ActivationOptions`: everything an activation monitor is configured with,
checked without the model (so a callback fails at construction, not at
`fit`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from keras_gradmon import _validation, defaults
from keras_gradmon.activations.layers import check_layers_argument
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.defaults import default_activation_rules
from keras_gradmon.alerts.delivery import Action, AlertDelivery, alerting
from keras_gradmon.alerts.engine import AlertEngine
from keras_gradmon.alerts.incidents import DEFAULT_FOLD_STEPS
from keras_gradmon.hub import Hub
from keras_gradmon.options import with_overrides
from keras_gradmon.schedule import Frequency, Schedule


@dataclasses.dataclass(frozen=True)
class ActivationOptions:
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

    data: Any
    layers: str | Sequence[str] | None = None
    every_n_steps: Frequency = defaults.ACTIVATION_EVERY_N_STEPS
    histogram_buckets: int | None = defaults.ACTIVATION_HISTOGRAM_BUCKETS
    std_band: tuple[float, float] | None = defaults.STD_BAND
    dead_fraction: float | None = defaults.DEAD_FRACTION
    rules: Mapping[str, Rule] | Sequence[Rule] | None = None
    actions: Mapping[str, Action] | None = None
    log_dir: str | None = None
    writer: Any = None
    jsonl_path: str | None = None
    cooldown_steps: int = 0
    max_per_rule: int | None = None
    tag_scope: str | None = None
    fold_steps: int | None = DEFAULT_FOLD_STEPS

    def __post_init__(self) -> None:
        if self.data is None:
            raise ValueError(
                "`data` must be a batch of model inputs to probe the layers "
                "with (e.g. x_val[:256]). Received: data=None"
            )
        check_layers_argument(self.layers)
        if self.histogram_buckets is not None:
            _validation.positive_int("histogram_buckets", self.histogram_buckets)
        if self.tag_scope is not None:
            _validation.non_empty_string("tag_scope", self.tag_scope)
        self.schedule()
        self.alerting()

    @classmethod
    def of(
        cls, options: Any, overrides: Mapping[str, Any], owner: str
    ) -> ActivationOptions:
        """The options from `options` (an `ActivationOptions`, or the probe
        batch `data`, or None) and keyword `overrides` (see
        `keras_gradmon.options.with_overrides`).

        Example:

        >>> ActivationOptions.of(x, {"every_n_steps": 10}, "m")  # doctest: +SKIP
        ActivationOptions(data=..., every_n_steps=10, ...)
        """
        if options is not None and not isinstance(options, cls):
            if "data" in overrides:
                raise ValueError(
                    f"{owner} got the probe batch twice: as its second "
                    "argument and as `data=`. Pass one."
                )
            overrides = {"data": options, **overrides}
            options = None
        return with_overrides(cls, options, overrides, owner)

    def schedule(self) -> Schedule:
        """When to measure (validates `every_n_steps`)."""
        return Schedule(self.every_n_steps)

    def alerting(self, hub: Hub | None = None) -> tuple[AlertEngine, AlertDelivery]:
        """The alert engine and delivery (validates the alert options); the
        flags go to `hub`, else to `log_dir` / `writer`."""
        rules = self.rules
        if rules is None:
            rules = default_activation_rules(self.std_band, self.dead_fraction)
        engine, delivery = alerting(
            rules,
            self.actions,
            self.log_dir if hub is None else None,
            self.writer if hub is None else None,
            self.jsonl_path,
            self.cooldown_steps,
            self.max_per_rule,
            hub,
            self.fold_steps,
        )
        delivery.tag_scope = self.tag_scope
        return engine, delivery
