"""The activation rules: each layer judged against its own recent level.

A layer's activations, probed in inference mode, have no healthy absolute
level. Measured on healthy training of standard architectures
(`docs/activations.md`), a squeeze-excite ReLU has half its units dead
by design, and while BatchNorm's moving statistics warm up (1,000 steps at
MobileNetV3's momentum of 0.999) a layer's std grows from 1e-13 to 0.01.
What healthy training does not do is take a layer's units away at once,
or flatten its outputs to a constant. So each rule keeps a layer's last
`window` summaries (`Trailing`) and judges the new one against their best:

`DeadUnitsRule`: most of the units that were alive have died.

`CollapseRule`: the std has fallen to a small part of its recent level.

Each fires once a condition starts and on every summary it holds (the
console folds the repeats into one incident), from the summary that
completes it; critical when it has held for `critical_patience` summaries.
"""

from __future__ import annotations

import abc
from collections import deque

from keras_gradmon import validation
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import CRITICAL, WARNING, Alert
from keras_gradmon.formatting import format_number

#: The metrics `ActivationMonitor` feeds its rules, one value per layer.
ACTIVATION_STD = "activation_std"
DEAD_FRACTION = "activation_dead_fraction"
ACTIVATION_NONFINITE = "activation_nonfinite"

DEAD_UNITS_HINT = (
    "lower the learning rate, check for a large negative bias, or use "
    "LeakyReLU/ELU or He initialization"
)
NONFINITE_ACTIVATIONS_HINT = (
    "the forward pass overflows: look for the first layer listed, its "
    "inputs and weights, and for non-finite gradients"
)
COLLAPSE_HINT = (
    "the layer's outputs no longer depend on its inputs: lower the learning "
    "rate, and check the weights for NaN or huge values"
)


class Trailing:
    """Each subject's last `window` values, and their best (largest).

    Example:

    >>> trailing = Trailing(window=2)
    >>> for value in (1.0, 3.0, 2.0):
    ...     trailing.add("h1", value)
    >>> trailing.best("h1"), trailing.best("h2")
    (3.0, None)
    """

    def __init__(self, window: int) -> None:
        self.window = validation.positive_int("window", window)
        self._values: dict[str, deque[float]] = {}

    def best(self, subject: str) -> float | None:
        """The largest of the subject's last `window` values; None before
        its first."""
        values = self._values.get(subject)
        return max(values) if values else None

    def add(self, subject: str, value: float) -> None:
        """Appends a value (the oldest beyond `window` is dropped)."""
        self._values.setdefault(subject, deque(maxlen=self.window)).append(value)

    def clear(self) -> None:
        """Forgets every subject."""
        self._values.clear()


class _LevelRule(Rule):
    """A layer's value against the best of its last `window` summaries: the
    condition (`_fallen`) starts on the summary that completes it and holds
    while the value stays as low against the level it fell from. Alerts on
    every summary it holds, critical from the `critical_patience`-th."""

    comparison = "<"

    def __init__(
        self,
        window: int,
        critical_patience: int,
        subjects: str | None,
        hint: str | None,
        metric: str | None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        self.trailing = Trailing(window)
        self.critical_patience = validation.positive_int(
            "critical_patience", critical_patience
        )
        #: subject -> (the level it fell from, summaries the fall has held).
        self._fallen: dict[str, tuple[float | None, int]] = {}

    @property
    def window(self) -> int:
        """Summaries of each layer's recent level."""
        return self.trailing.window

    def reset(self) -> None:
        super().reset()
        self.trailing.clear()
        self._fallen.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            level, held = self._fallen.get(subject, (None, 0))
            if held == 0:
                level = self.trailing.best(subject)
            self.trailing.add(subject, value)
            if not self._low(value, level):
                self._fallen.pop(subject, None)
                continue
            self._fallen[subject] = (level, held + 1)
            alerts.append(self._fall(step, subject, value, level, held + 1))
        return alerts

    def _tier(self, held: int) -> str:
        return CRITICAL if held >= self.critical_patience else WARNING

    @abc.abstractmethod
    def _low(self, value: float, level: float | None) -> bool:
        """Whether `value` is low against `level` (None: no level yet)."""

    @abc.abstractmethod
    def _fall(
        self, step: int, subject: str, value: float, level: float | None, held: int
    ) -> Alert:
        """The alert of a fall that has held `held` summaries."""


class DeadUnitsRule(_LevelRule):
    """Warns when most of a layer's live units die at once, or all of them.

    Reads a layer's dead fraction d (of units that output zero on every
    probe sample), so its live fraction 1 - d. The layer's level is its
    best live fraction over its last `window` summaries. The rule fires
    when the live fraction falls to `1 - fraction` of that level or below
    (by default: 90% of the live units died), and on any summary where
    every unit is dead (also the first). It holds while the layer stays
    that low; critical once it has held `critical_patience` summaries.

    Args:
        fraction: The share of a layer's live units whose death warns, in
            (0, 1).
        window: Summaries of the layer's recent level.
        critical_patience: Summaries the death must hold to be critical.
        subjects: Regex of layers to check (`re.search`); None for all.
        hint: Overrides the default hint.
        metric: Metric to read; default "activation_dead_fraction".

    Example:

    >>> rule = DeadUnitsRule()
    >>> rule.update(10, {"h1": 0.5}), rule.update(20, {"h1": 0.6})  # by design
    ([], [])
    >>> [(a.tier, a.value) for a in rule.update(30, {"h1": 1.0})]
    [('warning', 1.0)]
    >>> [(a.tier, a.value) for a in rule.update(40, {"h1": 1.0})]
    [('critical', 1.0)]
    """

    name = "dead_units"
    default_metric = DEAD_FRACTION
    default_hint = DEAD_UNITS_HINT
    comparison = ">="

    def __init__(
        self,
        fraction: float = 0.9,
        window: int = 5,
        critical_patience: int = 2,
        subjects: str | None = None,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(window, critical_patience, subjects, hint, metric)
        self.fraction = validation.open_unit_interval("fraction", fraction)

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        # The trailing level is kept in live fractions.
        return super()._evaluate(step, {s: 1.0 - d for s, d in values.items()})

    def _low(self, alive: float, level: float | None) -> bool:
        if alive <= 0.0:
            return True
        # The dead fraction is an exact ratio, 1 - d is not: one part in a
        # billion keeps 1 - 0.95 (0.05000000000000004) at 0.05's edge.
        edge = (1.0 - self.fraction) * level * (1.0 + 1e-9) if level else None
        return edge is not None and alive <= edge

    def _fall(
        self, step: int, subject: str, alive: float, level: float | None, held: int
    ) -> Alert:
        threshold = 1.0 if level is None else 1.0 - (1.0 - self.fraction) * level
        if level is None:
            was = " (every unit dead)"
        else:
            was = (
                f" (it was {format_number(1.0 - level)} within the last "
                f"{self.window} summaries)"
            )
        return self._alert(
            step,
            subject,
            1.0 - alive,
            min(threshold, 1.0),
            tier=self._tier(held),
            context=(f" for {held} summaries" if held > 1 else "") + was,
            details={"level": None if level is None else 1.0 - level, "held": held},
        )

    def __repr__(self) -> str:
        return (
            f"DeadUnitsRule(fraction={self.fraction!r}, window={self.window!r}, "
            f"critical_patience={self.critical_patience!r}, "
            f"subjects={self.subjects!r})"
        )


class CollapseRule(_LevelRule):
    """Warns when a layer's activation std falls to a small part of its
    recent level: its outputs have flattened to a constant.

    The layer's level is its largest std over its last `window` summaries;
    the rule fires when the std falls below `ratio` times that level, and
    holds while it stays below `ratio` times the level it fell from;
    critical once it has held `critical_patience` summaries. A std that
    only grows (BatchNorm's moving statistics warming up) never fires.

    Args:
        ratio: The part of the recent level the std must fall below, in
            (0, 1).
        window: Summaries of the layer's recent level.
        critical_patience: Summaries the collapse must hold to be critical.
        subjects: Regex of layers to check (`re.search`); None for all.
        hint: Overrides the default hint.
        metric: Metric to read; default "activation_std".

    Example:

    >>> rule = CollapseRule(ratio=0.01)
    >>> rule.update(10, {"h1": 0.5}), rule.update(20, {"h1": 0.2})
    ([], [])
    >>> [(a.tier, a.value) for a in rule.update(30, {"h1": 0.0})]
    [('warning', 0.0)]
    """

    name = "activation_collapse"
    default_metric = ACTIVATION_STD
    default_hint = COLLAPSE_HINT

    def __init__(
        self,
        ratio: float = 0.01,
        window: int = 5,
        critical_patience: int = 2,
        subjects: str | None = None,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(window, critical_patience, subjects, hint, metric)
        self.ratio = validation.open_unit_interval("ratio", ratio)

    def _low(self, std: float, level: float | None) -> bool:
        return level is not None and level > 0.0 and std < self.ratio * level

    def _fall(
        self, step: int, subject: str, std: float, level: float | None, held: int
    ) -> Alert:
        assert level is not None
        return self._alert(
            step,
            subject,
            std,
            self.ratio * level,
            tier=self._tier(held),
            context=(f" for {held} summaries" if held > 1 else "")
            + f" (it was {format_number(level)} within the last {self.window} "
            "summaries)",
            details={"level": level, "held": held},
        )

    def __repr__(self) -> str:
        return (
            f"CollapseRule(ratio={self.ratio!r}, window={self.window!r}, "
            f"critical_patience={self.critical_patience!r}, "
            f"subjects={self.subjects!r})"
        )
