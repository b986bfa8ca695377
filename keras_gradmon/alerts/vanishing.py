"""`VanishingRule`: a norm that stays below a floor."""

from __future__ import annotations

from keras_gradmon import _validation
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import Alert, format_number


class VanishingRule(Rule):
    """Warns when a subject's value stays below `floor` for `patience` summaries.

    The rule is edge-triggered: it fires once, on the summary that completes
    a run of `patience` consecutive values below the floor, and stays silent
    for the rest of that run. A value at or above the floor ends the run and
    re-arms the rule, so it fires again only if the value then falls and
    stays down for another `patience` summaries. Vanishing gradients are a
    slow, persistent condition, so repeating the alert on every summary
    would say nothing new. A summary without a finite value for a subject
    neither extends nor ends its run.

    Args:
        floor: Values strictly below it count as vanishing.
        patience: Consecutive summaries below the floor before the warning.
        subjects: Regex of subjects to check (`re.search`); None for all.
        hint: Overrides the default hint.
        metric: Metric to read; default "grad_norm".

    Example:

    >>> rule = VanishingRule(floor=1e-6, patience=2)
    >>> rule.update(1, {"dense/kernel": 1e-8})
    []
    >>> [a.step for a in rule.update(2, {"dense/kernel": 1e-9})]
    [2]
    >>> rule.update(3, {"dense/kernel": 1e-9})
    []
    """

    name = "vanishing"
    default_hint = (
        "check for dead ReLUs, saturating activations or a too-small learning "
        "rate; consider residual connections or normalization"
    )
    comparison = "<"

    def __init__(
        self,
        floor: float,
        patience: int = 3,
        subjects: str | None = None,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        self.floor = _validation.positive_finite("floor", floor)
        self.patience = _validation.positive_int("patience", patience)
        self._runs: dict[str, int] = {}

    def reset(self) -> None:
        super().reset()
        self._runs.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            run = self._runs.get(subject, 0) + 1 if value < self.floor else 0
            self._runs[subject] = run
            if run == self.patience:
                alerts.append(
                    self._alert(
                        step,
                        subject,
                        value,
                        self.floor,
                        context=(
                            f" for {run} consecutive summaries" if run > 1 else ""
                        ),
                        details={"consecutive": run, "patience": self.patience},
                    )
                )
        return alerts

    def __repr__(self) -> str:
        return (
            f"VanishingRule(floor={self.floor!r}, patience={self.patience!r}, "
            f"subjects={self.subjects!r})"
        )


#: The variables the default `VanishingLayersRule` compares: the layers'
#: kernels (Dense, Conv, LSTM's kernel and recurrent kernel, ...), not their
#: biases, normalization scales or embeddings.
KERNELS = r"kernel$"


class VanishingLayersRule(Rule):
    """Warns when some layers get `ratio` times less gradient than others.

    Vanishing gradients are a gap between layers: in a deep stack of
    sigmoid layers each layer passes back at most a quarter of the gradient
    it receives, so the first kernels get 1e-7 of what the last one gets and
    stop learning. The gap needs no model-specific scale, unlike a floor on
    the norm (`VanishingRule`), and it stays wide while the loss falls: a
    healthy run's norms all shrink together. The rule compares the smallest
    positive gradient norm of the selected variables with the largest, at
    each summary. Once the smallest has stayed below `ratio` times the
    largest for `patience` steps (counted from the summary before it first
    fell below, so that summaries every 100 steps fire on their first
    summary after 100 steps of gap), it warns once, naming the variable
    furthest behind; it fires again only after the gap closed. A summary
    with fewer than two positive norms neither extends nor ends the gap.

    At the defaults (1e-5 over 100 steps) a stack of 12 sigmoid layers
    fires at step 100; the query and key kernels of a freshly initialized
    attention layer (about 1e-4 of the others) do not.

    Args:
        ratio: Smallest over largest gradient norm below which the layers
            count as vanishing (0 < ratio < 1).
        patience: Steps the gap must last before the warning.
        subjects: Regex of the variables compared (`re.search`); by
            default the kernels.
        hint: Overrides the default hint.
        metric: Metric to read; default "grad_norm".

    Example:

    >>> rule = VanishingLayersRule()
    >>> norms = {"dense/kernel": 1e-9, "dense_1/kernel": 0.5}
    >>> rule.update(0, norms), rule.update(50, norms)
    ([], [])
    >>> [(a.step, a.subject) for a in rule.update(100, norms)]
    [(100, 'dense/kernel')]
    """

    name = "vanishing_layers"
    default_hint = VanishingRule.default_hint
    comparison = "<"

    def __init__(
        self,
        ratio: float = 1e-5,
        patience: int = 100,
        subjects: str | None = KERNELS,
        *,
        hint: str | None = None,
        metric: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects, hint=hint, metric=metric)
        self.ratio = _validation.open_unit_interval("ratio", ratio)
        self.patience = _validation.positive_int("patience", patience)
        self._previous: int | None = None
        self._since: int | None = None
        self._fired = False

    def reset(self) -> None:
        super().reset()
        self._previous = self._since = None
        self._fired = False

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        norms = {subject: value for subject, value in values.items() if value > 0}
        if len(norms) < 2:
            return []
        previous, self._previous = self._previous, step
        low = min(norms, key=norms.__getitem__)
        high = max(norms, key=norms.__getitem__)
        if norms[low] >= self.ratio * norms[high]:
            self._since, self._fired = None, False
            return []
        if self._since is None:
            self._since = step if previous is None else previous
        if self._fired or step - self._since < self.patience:
            return []
        self._fired = True
        return [self._gap(step, low, high, norms)]

    def _gap(self, step: int, low: str, high: str, norms: dict[str, float]) -> Alert:
        gap = norms[low] / norms[high]
        return self._alert(
            step,
            low,
            norms[low],
            self.ratio * norms[high],
            context=(
                f" ({format_number(gap)} of the largest, {high!r} = "
                f"{format_number(norms[high])}, since step {self._since})"
            ),
            details={"ratio": gap, "largest": high, "since_step": self._since},
        )

    def __repr__(self) -> str:
        return (
            f"VanishingLayersRule(ratio={self.ratio!r}, "
            f"patience={self.patience!r}, subjects={self.subjects!r})"
        )
