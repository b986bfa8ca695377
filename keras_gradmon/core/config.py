"""`MonitorConfig`: every option of the gradient monitor, validated at
construction (each check's error names the option and the value
received), and read from a JSON or YAML file (the file's `monitor`
section, or the whole file; errors name the file).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from keras_gradmon.columns import STATISTICS
from keras_gradmon.naming import check_groups
from keras_gradmon.schedule import Frequency, check_frequency
from keras_gradmon.validation import fail


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_tag_scope(value: object) -> None:
    """Refuses a tag scope that is not None nor a plain name.

    Example:

    >>> check_tag_scope("actor")
    """
    if value is not None and (
        not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", value)
    ):
        raise fail(
            "tag_scope",
            "must be None or a non-empty string of letters, digits, '_', '.' or '-'",
            value,
        )


def check_statistics(value: object) -> tuple[str, ...]:
    """The statistic names in `value`, as a tuple; unknown names refused.

    Example:

    >>> check_statistics(["norm", "mean"])
    ('norm', 'mean')
    """
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        names = list(STATISTICS)
        raise fail("statistics", f"must be a list of names from {names}", value)
    unknown = [name for name in value if name not in STATISTICS]
    if unknown:
        raise ValueError(
            f"`statistics` contains unknown statistic {unknown[0]!r}. Valid "
            f"names: {list(STATISTICS)}. Received: statistics={value!r}"
        )
    return tuple(value)


def check_clipping(clipping: Any) -> dict | None:
    """The `clipping` option with `"enabled"` filled in; an invalid rule or
    parameter refused with the option in the message.

    Example:

    >>> check_clipping({"method": "global_norm", "max_norm": 1.0})["enabled"]
    True
    """
    if clipping is None:
        return None
    if not isinstance(clipping, Mapping) or "method" not in clipping:
        requirement = 'must be None or a mapping with a "method" key'
        raise fail("clipping", requirement, clipping)
    options = dict(clipping)
    enabled = options.pop("enabled", True)
    if not isinstance(enabled, bool):
        raise fail("clipping['enabled']", "must be a bool", enabled)
    from keras_gradmon.core.clipping import make_clip_rule

    try:
        make_clip_rule(**options)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"Invalid `clipping`: {error} (in clipping={dict(clipping)!r})"
        ) from None
    return {**options, "enabled": enabled}


def check_skip_spikes(value: Any) -> Any:
    """The `skip_spikes` option (a mapping copied to a dict), refused with
    the option named when invalid.

    Example:

    >>> check_skip_spikes({"window": 32, "min_history": 16})
    {'window': 32, 'min_history': 16}
    """
    if value is False:
        return value  # (without importing Keras: the report reads configs)
    from keras_gradmon.core.signals import SpikeSkipper

    SpikeSkipper.from_option(value)
    return dict(value) if isinstance(value, Mapping) else value


def check_noise_scale(value: Any) -> Any:
    """The `noise_scale` option (a mapping copied to a dict), refused with
    the option named when invalid.

    Example:

    >>> check_noise_scale({"batch_size": 32})
    {'batch_size': 32}
    """
    if value is False:
        return value  # (without importing Keras: the report reads configs)
    from keras_gradmon.core.noise_scale import from_option

    from_option(value)
    return dict(value) if isinstance(value, Mapping) else value


#: The sections of a config file, each holding one options object's
#: fields: `MonitorConfig`, `AlertOptions`, `ActivationOptions`, `RLOptions`.
SECTIONS: tuple[str, ...] = ("monitor", "alerts", "activations", "rl")


def read_section(path: str, section: str) -> Mapping[str, Any]:
    """The options under the top-level key `section` of the JSON or YAML file
    at `path` (an empty mapping when it has none). A file with none of the
    `SECTIONS` holds the gradient monitor's options alone: they are its
    `monitor` section.

    Raises:
        ValueError: The file is not JSON/YAML, is empty, or holds no mapping;
            the message names the file.

    Example:

    >>> read_section("train.yaml", "alerts")  # doctest: +SKIP
    {'actions': {'critical': 'stop'}}
    """
    contents = _read_config_file(path)
    if isinstance(contents, Mapping) and any(s in contents for s in SECTIONS):
        options = contents.get(section) or {}
    else:
        options = contents if section == "monitor" else {}
    if not isinstance(options, Mapping):
        raise ValueError(
            f"The `{section}` options in {path!r} must be a mapping of options "
            f"(under a top-level `{section}` key). Received: {options!r}"
        )
    return options


def monitor_section(path: str) -> Mapping[str, Any]:
    """The gradient monitor's options in the file at `path` (its `monitor`
    section, or the whole file when it has no section).

    Example:

    >>> monitor_section("train.yaml")  # doctest: +SKIP
    {'every_n_steps': 10}
    """
    return read_section(path, "monitor")


def _read_config_file(path: str) -> Any:
    """The parsed contents of a JSON or YAML file; errors name the file."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise ValueError(
            f"A config file must end in .json, .yaml or .yml. Received: path={path!r}"
        )
    with open(path, encoding="utf-8") as file:
        text = file.read()
    if suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path!r} is not valid JSON: {error.msg} at line {error.lineno}, "
                f"column {error.colno}"
                + (" (the file is empty)" if not text.strip() else "")
            ) from None
    try:
        import yaml
    except ImportError:
        raise ValueError(
            "Reading a YAML config needs PyYAML: pip install "
            f"'keras-gradmon[yaml]'. Received: path={path!r}"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"{path!r} is not valid YAML: {error}") from None


@dataclasses.dataclass(frozen=True)
class MonitorConfig:
    """Options of `GradientMonitorOptimizer`.

    Args:
        every_n_steps: When to compute scalar statistics: a positive int (on
            steps 0, N, 2N, ... of the optimizer's iteration count) or a
            callable from the int64 step tensor to a boolean tensor, traced
            into the train step (so it must be plain tensor math).
        histogram_every_n_steps: When to compute histogram bucket counts: a
            positive int, a callable as above, or None for no histograms.
        histogram_buckets: Number of equal-width histogram buckets (30, as
            TensorBoard).
        statistics: Which per-variable statistics to record, a subset of
            `keras_gradmon.core.batched.STATISTICS`.
        weight_statistics: Also record the statistics of the weights, and the
            gradient-to-weight norm ratio of each variable.
        per_variable: Record statistics per variable (global and group
            norms are always recorded).
        per_variable_scalars: Write the per-variable numbers as scalar tags
            (`grad_norm/<variable path>`, ...: a chart each in TensorBoard's
            Scalars tab) instead of one table a step
            (`keras_gradmon/variables`, read by the keras_gradmon dashboard
            and `keras-gradmon report`).
        groups: Named groups of variables, `{name: regex}`; a variable belongs
            to a group when `re.search(regex, variable_path)` matches. A
            group's norm is the L2 norm of all its elements.
        tag_scope: Inserted after the statistic in every TensorBoard tag
            (`grad_norm/<tag_scope>/global`), so that several monitored
            optimizers in one run (an actor and a critic) never collide.
        clipping: None (no clipping) or `{"method": ..., **parameters}` with
            method `"global_norm"` (`max_norm`), `"autoclip"`
            (`percentile`, `history`), `"zclip"` (`alpha`, `z_threshold`,
            `warmup`, ...) or `"agc"` (`clipping`, `eps`); an optional
            `"enabled": False` keeps the settings but turns clipping off.
            Clipping runs on every step, whatever the summary frequency.
        skip_nonfinite: Skip the update (weights and the inner optimizer's
            state untouched) on a step where any gradient holds NaN or Inf,
            and count it.
        update_statistics: Also record the update/weight ratio (the
            effective learning rate) of each variable, group and of all
            variables on scalar summaries: ||w_after - w_before|| /
            ||w_before|| of the update the inner optimizer applied.
        track_spikes: Keep the largest and smallest global gradient norm
            of the steps between two summaries, and the step of the
            largest, and write them with the next summary (costs one global
            norm per step, free when clipping computes it).
        skip_spikes: Skip the update of a step whose global norm is more
            than `z_threshold` standard deviations above the mean of the
            last `window` norms (OLMo-core's `SkipStepOptimizer`): False,
            True, or a mapping of `z_threshold` (6.0), `window` (128) and
            `min_history` (64).
        noise_scale: Estimate the gradient noise scale B_simple
            (McCandlish et al. 2018) from the per-replica gradients under
            `tf.distribute`, or the micro-batches of the inner optimizer's
            `gradient_accumulation_steps`: False, True, or a mapping (see
            docs/noise_scale.md).
        summary_history: How many recorded summaries (and histogram steps)
            the state keeps for the host to read. A train step that applies
            several times per batch, or `steps_per_execution`, records
            several summaries between two reads; all of them are written
            as long as no more than this many come between two reads (the
            writer says when some were lost, and writes their count under
            `dropped/summaries`).

    Example:

    >>> config = MonitorConfig(every_n_steps=10, groups={"head": "dense_2"})
    >>> config.every_n_steps
    10
    """

    every_n_steps: Frequency = 100
    histogram_every_n_steps: Frequency | None = 1000
    histogram_buckets: int = 30
    statistics: tuple[str, ...] = STATISTICS
    weight_statistics: bool = True
    per_variable: bool = True
    per_variable_scalars: bool = False
    groups: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tag_scope: str | None = None
    clipping: Mapping[str, Any] | None = None
    skip_nonfinite: bool = False
    update_statistics: bool = True
    track_spikes: bool = False
    skip_spikes: bool | Mapping[str, Any] = False
    noise_scale: bool | Mapping[str, Any] = False
    summary_history: int = 32

    def __post_init__(self) -> None:
        self._validate_frequency("every_n_steps", self.every_n_steps)
        if self.histogram_every_n_steps is not None:
            self._validate_frequency(
                "histogram_every_n_steps", self.histogram_every_n_steps
            )
        if not _is_positive_int(self.histogram_buckets):
            raise fail(
                "histogram_buckets",
                "must be a positive integer",
                self.histogram_buckets,
            )
        self._validate_statistics()
        bools = ("weight_statistics", "per_variable", "skip_nonfinite")
        bools += ("per_variable_scalars",)
        for name in (*bools, "update_statistics", "track_spikes"):
            if not isinstance(getattr(self, name), bool):
                raise fail(name, "must be a bool", getattr(self, name))
        self._validate_groups()
        self._validate_clipping()
        self._validate_signals()
        check_tag_scope(self.tag_scope)
        if not _is_positive_int(self.summary_history):
            history = self.summary_history
            raise fail("summary_history", "must be a positive integer", history)

    @staticmethod
    def _validate_frequency(name: str, value: object) -> None:
        check_frequency(name, value)

    def _validate_statistics(self) -> None:
        object.__setattr__(self, "statistics", check_statistics(self.statistics))

    def _validate_groups(self) -> None:
        object.__setattr__(self, "groups", check_groups(self.groups))

    def _validate_clipping(self) -> None:
        object.__setattr__(self, "clipping", check_clipping(self.clipping))

    def _validate_signals(self) -> None:
        object.__setattr__(self, "skip_spikes", check_skip_spikes(self.skip_spikes))
        object.__setattr__(self, "noise_scale", check_noise_scale(self.noise_scale))

    def features(self, loss_scaled: bool = False) -> frozenset[str]:
        """What these options turn on, as the features of
        `keras_gradmon.columns.FEATURES`: each number of the summary row is
        written when its feature is on (`loss_scaled`: the inner optimizer
        is a loss scaler).

        Example:

        >>> sorted(MonitorConfig(weight_statistics=False).features())
        ['always', 'per_variable', 'updates']
        """
        noise, skip_spikes = self.noise_scale, bool(self.skip_spikes)
        on = {
            "always": True,
            "weights": self.weight_statistics,
            "per_variable": self.per_variable,
            "per_variable_scalars": self.per_variable and self.per_variable_scalars,
            "updates": self.update_statistics,
            "clip": self.clip_rule is not None,
            "skip": self.skip_nonfinite or loss_scaled or skip_spikes,
            "loss_scale": loss_scaled,
            "spikes": self.track_spikes,
            "skip_spikes": skip_spikes,
            "noise": bool(noise),
            "noise_examples": isinstance(noise, dict) and bool(noise.get("batch_size")),
        }
        return frozenset(name for name, value in on.items() if value)

    @property
    def clip_rule(self) -> Any:
        """The configured `keras_gradmon.core.clipping` rule, or None when off."""
        if self.clipping is None or not self.clipping["enabled"]:
            return None
        from keras_gradmon.core.clipping import make_clip_rule

        options = {k: v for k, v in self.clipping.items() if k != "enabled"}
        return make_clip_rule(**options)

    # Presets and conversion --------------------------------------------------

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> MonitorConfig:
        """A named bundle of options, Cockpit style, with `overrides` on top.

        - `"economy"`: gradient norms and non-finite counts only (per
          variable, group and global), no weight statistics, no
          histograms: the cheapest setting for statistics every step.
        - `"full"`: every statistic, for gradients and weights, and
          histograms every 1000 steps (the defaults).

        Example:

        >>> MonitorConfig.preset("economy", every_n_steps=1).statistics
        ('norm', 'nonfinite')
        """
        if name not in PRESETS:
            raise ValueError(
                f"Unknown preset {name!r}. Valid presets: {sorted(PRESETS)}. "
                f"Received: name={name!r}"
            )
        return cls.from_dict({**PRESETS[name], **overrides})

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The valid option names."""
        return tuple(field.name for field in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> MonitorConfig:
        """Builds a config from a dict; unknown keys are an error.

        Example:

        >>> MonitorConfig.from_dict({"every_n_steps": 5}).every_n_steps
        5
        """
        if not isinstance(options, Mapping):
            raise ValueError(
                f"A monitor config must be a mapping. Received: {options!r}"
            )
        cls._check_known(options)
        return cls(**options)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> MonitorConfig:
        """Reads a config from a JSON (`.json`) or YAML (`.yaml`, `.yml`) file.

        The file holds the options as a mapping, or holds them under a
        top-level `monitor` key beside other settings (which are left alone),
        so the monitor can share a file with the rest of a training config.
        Every error names the file.

        Example:

        ```yaml
        # train.yaml
        training: {epochs: 10}
        monitor:
          every_n_steps: 10
          clipping: {method: global_norm, max_norm: 1.0}
        ```

        >>> MonitorConfig.from_file("train.yaml")  # doctest: +SKIP
        """
        path = os.fspath(path)
        options = monitor_section(path)
        try:
            return cls.from_dict(options)
        except ValueError as error:
            raise ValueError(f"{error} (in {path!r})") from None

    def to_dict(self) -> dict[str, Any]:
        """The options as plain Python data (lists and dicts)."""
        result = {}
        for name in self.field_names():
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Mapping):
                value = dict(value)
                if name == "clipping" and value.get("enabled", True):
                    del value["enabled"]
            result[name] = value
        return result

    @classmethod
    def resolve(
        cls,
        config: MonitorConfig | Mapping[str, Any] | str | os.PathLike | None,
        options: Mapping,
    ) -> MonitorConfig:
        """The config a wrapper was given: `config` (an instance, a dict, a
        config file's path, or None for the defaults) with keyword `options`
        on top."""
        if config is None:
            config = cls()
        elif isinstance(config, Mapping):
            config = cls.from_dict(config)
        elif isinstance(config, (str, os.PathLike)):
            config = cls.from_file(config)
        elif not isinstance(config, cls):
            raise ValueError(
                "`config` must be a keras_gradmon.MonitorConfig, a dict, a "
                f"config file's path or None. Received: config={config!r}"
            )
        return config.replace(**options) if options else config

    def to_serializable_dict(self) -> dict[str, Any]:
        """`to_dict()`, refusing callables (they cannot be saved with a model)."""
        options = self.to_dict()
        for key in ("every_n_steps", "histogram_every_n_steps"):
            if callable(options[key]):
                raise ValueError(
                    f"A callable `{key}` cannot be serialized. Use an int "
                    f"to save this optimizer. Received: {key}={options[key]!r}"
                )
        return options

    def replace(self, **changes: Any) -> MonitorConfig:
        """A copy with some options changed (validated like the original)."""
        self._check_known(changes)
        return dataclasses.replace(self, **changes)

    @classmethod
    def _check_known(cls, options: Mapping[str, Any]) -> None:
        """Refuses a name that is no option, listing the options."""
        unknown = sorted(set(options) - set(cls.field_names()))
        if unknown:
            raise ValueError(
                f"Unknown monitor option(s) {unknown}. Valid options: "
                f"{list(cls.field_names())}."
            )


#: The options of each `MonitorConfig.preset`.
PRESETS: dict[str, dict[str, Any]] = {
    "economy": {
        "statistics": ("norm", "nonfinite"),
        "weight_statistics": False,
        "update_statistics": False,
        "histogram_every_n_steps": None,
    },
    "full": {},
}
