"""The RL alert rules, on the shared alert machinery: entropy collapse,
overestimation, low intensity, return collapse, throughput drop; the
streaks they count; what an RL summary holds for them.

Pure Python: `RLHealthMonitor` feeds each summary's numbers to an
`AlertEngine` holding these rules, and delivers what fires with
`AlertDelivery` (log line, `alerts/rl/<rule>` flags, `alert_log/rl/all`
texts for `keras-gradmon report --fail-on`, tier actions).

A streak (`Streaks`, `StreakRule`) is counted in summaries and spans steps.
A rule whose patience is in summaries alone means something else at every
summary frequency (2 summaries are 2,000 steps at the RL monitor's default
of 1,000, 2 steps at every step), so the default rules also ask for a span
in `steps`, which means the same at every frequency.

Example:

>>> from keras_gradmon.alerts import AlertEngine
>>> engine = AlertEngine(default_rl_rules())
>>> alerts = engine.update(1000, {"training intensity": {"replay": 0.5}})
>>> alerts = engine.update(2000, {"training intensity": {"replay": 0.5}})
>>> alerts[0].message.split(":")[0]
'WARNING training intensity low at step 2000'
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from keras_gradmon import validation
from keras_gradmon.alerts.base import Rule
from keras_gradmon.alerts.events import Alert
from keras_gradmon.formatting import format_number


class Streaks:
    """Per subject, the summaries in a row a condition has held and the
    step of the first of them.

    Args:
        patience: Summaries in a row before a streak is long enough.
        steps: Steps from the first summary of a streak to the current one
            before it is long enough (0: the summaries alone count).

    Example:

    >>> streaks = Streaks(patience=2, steps=100)
    >>> [streaks.extend("a", step) for step in (0, 50, 100)]
    [False, False, True]
    >>> streaks.context("a", 100)
    ' for 3 summaries since step 0'
    """

    def __init__(self, patience: int, steps: int = 0) -> None:
        self.patience = validation.positive_int("patience", patience)
        self.steps = validation.non_negative_int("steps", steps)
        self._runs: dict[str, tuple[int, int]] = {}

    def extend(self, subject: str, step: int) -> bool:
        """The condition holds at `step`: whether the streak is now long
        enough (`patience` summaries over at least `steps` steps)."""
        count, start = self._runs.get(subject, (0, step))
        self._runs[subject] = (count + 1, start)
        return count + 1 >= self.patience and step - start >= self.steps

    def end(self, subject: str) -> None:
        """The condition does not hold: the streak of `subject` ends."""
        self._runs.pop(subject, None)

    def count(self, subject: str) -> int:
        """Summaries in the streak of `subject` (0 without one)."""
        return self._runs.get(subject, (0, 0))[0]

    def context(self, subject: str, step: int) -> str:
        """How long it held, for an alert's message ("" for a streak of
        one summary that needs no more)."""
        count, start = self._runs[subject]
        if self.steps:
            return f" for {count} summaries since step {start}"
        return f" for {count} summaries" if self.patience > 1 else ""

    def clear(self) -> None:
        self._runs.clear()


class StreakRule(Rule):
    """A rule that fires when `breached(value)` has held for `patience`
    consecutive summaries of a subject spanning at least `steps` steps, and
    at each further one while it holds; subclasses say what a breach is and
    its `limit` (the threshold the alert names). Consecutive among the
    summaries that hold a value for the subject: one without it (not
    measured then) neither breaks nor extends the streak.

    Args:
        patience: Consecutive summaries before it fires.
        steps: Steps the streak must span, from its first summary to the
            current one (0: the summaries alone count).
    """

    def __init__(self, patience: int, steps: int = 0) -> None:
        super().__init__()
        self.streaks = Streaks(patience, steps)

    @property
    def patience(self) -> int:
        return self.streaks.patience

    @property
    def limit(self) -> float:
        raise NotImplementedError

    def breached(self, value: float) -> bool:
        raise NotImplementedError

    def reset(self) -> None:
        super().reset()
        self.streaks.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            if not self.breached(value):
                self.streaks.end(subject)
            elif self.streaks.extend(subject, step):
                context = self.streaks.context(subject, step)
                alerts.append(
                    self._alert(step, subject, value, self.limit, context=context)
                )
        return alerts


INTENSITY = "training intensity"  # {"replay": batch x train steps / env steps}
RETURN = "return"  # {"episodes": mean of the last N, "evaluation": eval mean}
THROUGHPUT = "env steps/s"  # {"collection": environment steps per second}


class LowIntensityRule(StreakRule):
    """Warns when the training intensity stays below `minimum` (1: some
    samples are never trained on) for `patience` consecutive summaries
    spanning `steps` steps (see `StreakRule`; the intensity is measured
    once an environment step is collected).

    Args:
        minimum: Fires below this intensity (> 0).
        patience: Consecutive summaries below `minimum` before it fires.
        steps: Steps those summaries must span (the default rules: 1,000,
            so that a replay buffer's prefill, which makes the first steps'
            intensity low, is not a streak).

    Example:

    >>> rule = LowIntensityRule(patience=1)
    >>> [a.value for a in rule.update(10, {"replay": 0.5})]
    [0.5]
    """

    name = "low"
    default_metric = INTENSITY
    comparison = "<"
    default_hint = (
        "train more per environment step: more train steps per iteration, a "
        "larger batch, or fewer collect steps per iteration"
    )

    def __init__(
        self, minimum: float = 1.0, patience: int = 2, steps: int = 0
    ) -> None:
        super().__init__(patience, steps)
        self.minimum = validation.positive_finite("minimum", minimum)

    @property
    def limit(self) -> float:
        return self.minimum

    def breached(self, value: float) -> bool:
        return value < self.minimum


class ReturnCollapseRule(Rule):
    """Warns when the mean return falls from its running best by `drop` of
    the way from `baseline` (a random agent's return, 0 by default) to the
    best: below `best - drop * (best - baseline)`, once the best is above
    `baseline` (before, there is no progress to lose). Each subject
    (collect "episodes", "evaluation") has its own best, the highest mean
    it was fed; `RLHealthMonitor` feeds the collect return once 10
    episodes are kept (`readings.MIN_EPISODES`) and every evaluation.

    Args:
        drop: The fraction of the progress lost that fires (0, 1).
        baseline: The return that counts as no progress.
        subjects: Regex on the subjects it judges; "evaluation" judges the
            evaluations only (then any `window` will do). None: both.

    Example:

    >>> rule = ReturnCollapseRule(drop=0.5)
    >>> rule.update(1000, {"episodes": 180.0}), rule.update(2000, {"episodes": 120.0})
    ([], [])
    >>> [a.threshold for a in rule.update(2500, {"episodes": 60.0})]
    [90.0]
    """

    name = "collapse"
    default_metric = RETURN
    comparison = "<"
    default_hint = (
        "the agent unlearned: lower the learning rate, update the target "
        "network more slowly, clip gradients, or keep the best checkpoint"
    )

    def __init__(
        self,
        drop: float = 0.5,
        baseline: float = 0.0,
        *,
        subjects: str | None = None,
    ) -> None:
        super().__init__(subjects=subjects)
        self.drop = validation.open_unit_interval("drop", drop)
        if not isinstance(baseline, (int, float)) or isinstance(baseline, bool):
            raise ValueError(
                f"`baseline` must be a number. Received: baseline={baseline!r}"
            )
        self.baseline = float(baseline)
        self._best: dict[str, tuple[int, float]] = {}
        self._last_steps: dict[str, int] = {}

    def reset(self) -> None:
        super().reset()
        self._best.clear()
        self._last_steps.clear()

    def update(self, step: int, values: Mapping[str, float]) -> list[Alert]:
        """As `Rule.update`, with freshness per subject: the collect
        episodes ("episodes", at summaries) and evaluations ("evaluation",
        whenever they are recorded) may arrive at the same step."""
        step, alerts = int(step), []
        for subject, value in values.items():
            last = self._last_steps.get(subject)
            if last is not None and step <= last:
                continue
            self.last_step = None
            alerts += super().update(step, {subject: value})
            self._last_steps[subject] = step
        return alerts

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            best_step, best = self._best.get(subject, (step, value))
            if value > best:
                best_step, best = step, value
            self._best[subject] = (best_step, best)
            threshold = best - self.drop * (best - self.baseline)
            if best > self.baseline and value < threshold:
                alerts.append(
                    self._alert(
                        step,
                        subject,
                        value,
                        threshold,
                        context=f" (best {format_number(best)} at step {best_step})",
                        details={"best": best, "best_step": best_step},
                    )
                )
        return alerts


class ThroughputDropRule(Rule):
    """Warns when environment steps per second stay below `1 - drop` times
    their median over the previous `history` normal summaries for
    `patience` consecutive summaries spanning `steps` steps (one slow
    interval, e.g. an evaluation pause, is not a drop). A summary is
    normal when it is not below that; until `history` normal summaries are
    kept, every summary is normal (no median to judge against yet).

    Args:
        drop: The fraction of the median lost that counts as slow (0, 1).
        history: Normal summaries the median is taken over.
        patience: Consecutive slow summaries before it fires.
        steps: Steps those summaries must span (the default rules: 1,000;
            at a summary every step, one step's speed is noise).

    Example:

    >>> rule = ThroughputDropRule(drop=0.5, history=3, patience=2)
    >>> for step, sps in [(1, 1000.0), (2, 1100.0), (3, 900.0), (4, 300.0)]:
    ...     _ = rule.update(step, {"collection": sps})
    >>> [a.threshold for a in rule.update(5, {"collection": 200.0})]
    [500.0]
    """

    name = "drop"
    default_metric = THROUGHPUT
    comparison = "<"
    default_hint = (
        "the environment or the host slowed down: check for other processes, "
        "a growing replay buffer, or summaries written too often"
    )

    def __init__(
        self, drop: float = 0.5, history: int = 5, patience: int = 2, steps: int = 0
    ) -> None:
        super().__init__()
        self.drop = validation.open_unit_interval("drop", drop)
        self.history = validation.positive_int("history", history)
        self.slow = Streaks(patience, steps)
        self._normal: dict[str, deque[float]] = {}

    @property
    def patience(self) -> int:
        return self.slow.patience

    def reset(self) -> None:
        super().reset()
        self._normal.clear()
        self.slow.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            normal = self._normal.setdefault(subject, deque(maxlen=self.history))
            full = len(normal) == self.history
            typical = statistics.median(normal) if full else None
            if typical is None or value >= (1.0 - self.drop) * typical:
                normal.append(value)  # the reference learns normal speeds only
                self.slow.end(subject)
                continue
            if self.slow.extend(subject, step):
                context = self.slow.context(subject, step)
                alerts.append(
                    self._alert(
                        step,
                        subject,
                        value,
                        (1.0 - self.drop) * typical,
                        context=f"{context} (median {format_number(typical)} before)",
                        details={"median": typical},
                    )
                )
        return alerts


#: The metrics the rules read, each `{subject: value}` at a summary.
ENTROPY = "entropy"  # {"collect_policy": entropy / ln(number of actions)}
VALUE_RATIO = "value/return"  # {"start_states": estimate / realized return}


class EntropyCollapseRule(Rule):
    """Warns when the policy's entropy falls fast: below `fraction` of the
    highest value it had within the last `window` steps.

    The value is the entropy as a fraction of its maximum, ln(number of
    actions), so the rule reads the same for any action count. A planned,
    slow epsilon decay stays quiet; a policy that stops exploring within
    `window` steps does not. The value itself is in the window, so a first
    value (its own peak) never fires; it fires at each summary below.

    Args:
        fraction: Fires below this fraction of the window's maximum (0, 1).
        window: Steps the maximum is taken over (summaries in
            `(step - window, step]`).

    Example:

    >>> rule = EntropyCollapseRule(fraction=0.25, window=1000)
    >>> rule.update(0, {"collect_policy": 0.9}), rule.update(1500, {"collect_policy": 0.3})
    ([], [])
    >>> [a.tier for a in rule.update(2000, {"collect_policy": 0.05})]
    ['warning']
    """  # noqa: E501

    name = "collapse"
    default_metric = ENTROPY
    comparison = "<"
    default_hint = (
        "exploration is ending: decay epsilon more slowly, or raise the "
        "entropy bonus (entropy_regularization, SAC's target entropy)"
    )

    def __init__(self, fraction: float = 0.25, window: int = 10_000) -> None:
        super().__init__()
        self.fraction = validation.open_unit_interval("fraction", fraction)
        self.window = validation.positive_int("window", window)
        self._seen: dict[str, deque[tuple[int, float]]] = {}

    def reset(self) -> None:
        super().reset()
        self._seen.clear()

    def _evaluate(self, step: int, values: dict[str, float]) -> list[Alert]:
        alerts = []
        for subject, value in values.items():
            seen = self._seen.setdefault(subject, deque())
            seen.append((step, value))
            while seen[0][0] <= step - self.window:
                seen.popleft()
            peak_step, peak = max(seen, key=lambda point: point[1])
            if peak > 0 and value < self.fraction * peak:
                alerts.append(
                    self._alert(
                        step,
                        subject,
                        value,
                        self.fraction * peak,
                        context=(
                            f" (down from {format_number(peak)} at step "
                            f"{peak_step}, within {self.window} steps)"
                        ),
                        details={"peak": peak, "peak_step": peak_step},
                    )
                )
        return alerts


class OverestimationRule(StreakRule):
    """Warns when the value estimate exceeds the realized return `ratio`
    times over for `patience` consecutive summaries spanning `steps` steps
    (see `StreakRule`: the ratio is measured once an episode is complete
    and while the realized return is positive).

    Early in training the estimate at the start states runs ahead of
    returns realized by older, worse policies; `patience` summaries in a
    row separate a lasting overestimation from that lag.

    Args:
        ratio: Estimate / realized return above which it fires (> 1).
        patience: Consecutive summaries above `ratio` before it fires.
        steps: Steps those summaries must span (the default rules: 2,000).

    Example:

    >>> rule = OverestimationRule(ratio=2.0, patience=2)
    >>> rule.update(5, {"start_states": 2.5})
    []
    >>> [a.tier for a in rule.update(6, {"start_states": 2.6})]
    ['warning']
    """

    name = "overestimation"
    default_metric = VALUE_RATIO
    default_hint = (
        "the value estimate runs away from the returns: use double Q-learning "
        "(DdqnAgent, TD3's twin critics), update the target network more "
        "slowly, or lower the learning rate"
    )

    def __init__(
        self, ratio: float = 2.0, patience: int = 3, steps: int = 0
    ) -> None:
        super().__init__(patience, steps)
        self.ratio = validation.greater_than_one("ratio", ratio)

    @property
    def limit(self) -> float:
        return self.ratio

    def breached(self, value: float) -> bool:
        return value > self.ratio


def default_rl_rules() -> dict[str, Rule]:
    """Fresh RL rules, keyed by the name of their `alerts/rl/<name>` flag.

    The streaks are in steps as well as summaries, so the rules mean the
    same at every summary frequency: at the RL monitor's default (a summary
    every 1,000 steps) 2 and 3 summaries in a row span 1,000 and 2,000
    steps, which is what the rules ask for at any frequency.

    Example:

    >>> sorted(default_rl_rules())  # doctest: +NORMALIZE_WHITESPACE
    ['entropy_collapse', 'low_intensity', 'return_collapse', 'throughput_drop',
     'value_overestimation']
    """
    return {
        "entropy_collapse": EntropyCollapseRule(),
        "value_overestimation": OverestimationRule(patience=3, steps=2000),
        "low_intensity": LowIntensityRule(patience=2, steps=1000),
        "return_collapse": ReturnCollapseRule(),
        "throughput_drop": ThroughputDropRule(patience=2, steps=1000),
    }


#: The collect return is judged once this many episodes are kept: the mean
#: of fewer is too noisy to call a collapse.
MIN_EPISODES = 10
#: The subject of the collect return (evaluations are "evaluation").
COLLECT = "episodes"


def collect_return_judged(count: float, window: int) -> bool:
    """Whether the rules read the collect return: at least `MIN_EPISODES`
    episodes kept, the last `min(count, window)` of `count` completed.

    Example:

    >>> collect_return_judged(10, window=100), collect_return_judged(9, 100)
    (True, False)
    >>> collect_return_judged(1000, window=5)  # never more than 5 kept
    False
    """
    return min(count, window) >= MIN_EPISODES


def check_window(window: int, rules: Iterable[Rule]) -> None:
    """Refuses a `window` too small for a rule that reads the collect
    return: it would never be judged.

    Example:

    >>> check_window(5, default_rl_rules().values())
    Traceback (most recent call last):
    ...
    ValueError: `window` must be at least 10 while a rule reads the collect \
return (ReturnCollapseRule): it is judged once 10 episodes are kept, and a \
window of 5 never keeps them. Raise `window`, or judge the evaluations only \
(`ReturnCollapseRule(subjects="evaluation")`), or leave the rule out of \
`rules`. Received: window=5
    """
    readers = [
        type(rule).__name__
        for rule in rules
        if rule.metric == RETURN and rule.applies_to(COLLECT)
    ]
    if readers and window < MIN_EPISODES:
        raise ValueError(
            f"`window` must be at least {MIN_EPISODES} while a rule reads the "
            f"collect return ({readers[0]}): it is judged once {MIN_EPISODES} "
            f"episodes are kept, and a window of {window} never keeps them. "
            "Raise `window`, or judge the evaluations only "
            '(`ReturnCollapseRule(subjects="evaluation")`), or leave the rule '
            "out of `rules`. "
            f"Received: window={window!r}"
        )


def episode_numbers(episodes: dict[str, float]) -> dict[str, float]:
    """The `episode/*` numbers; only the count before the first episode."""
    if episodes["count"] == 0:
        return {"episode/count": 0.0}
    skip = ("env_steps", "discounted_return_mean")
    return {f"episode/{k}": v for k, v in episodes.items() if k not in skip}


def derived(
    numbers: dict[str, float], episodes: dict[str, float], probe: Any
) -> dict[str, float]:
    """Adds the entropy fraction and the value/return ratio; drops the
    start-state numbers while no episode is complete."""
    if episodes["count"] == 0:
        numbers.pop("value/start_estimate", None)
        numbers.pop("value/start_return", None)
    entropy = numbers.get("policy/entropy")
    if entropy is not None and probe.max_entropy:
        numbers["policy/entropy_fraction"] = entropy / probe.max_entropy
    estimate = numbers.get("value/start_estimate")
    realized = numbers.get("value/start_return")
    if estimate is not None and realized is not None and realized > 0:
        numbers["value/overestimation"] = estimate / realized
    return numbers


def alert_metrics(
    recorded: dict[str, float], window: int
) -> dict[str, dict[str, float]]:
    """The numbers the RL rules read, `{metric: {subject: value}}`; the
    collect return once `collect_return_judged` (episodes over `window`).

    Example:

    >>> numbers = {"episode/count": 10.0, "episode/return_mean": 20.0}
    >>> alert_metrics(numbers, window=100), alert_metrics(numbers, window=9)
    ({'return': {'episodes': 20.0}}, {})
    """
    sources = {
        ENTROPY: ("collect_policy", "policy/entropy_fraction"),
        VALUE_RATIO: ("start_states", "value/overestimation"),
        INTENSITY: ("replay", "progress/training_intensity"),
        THROUGHPUT: ("collection", "progress/env_steps_per_sec"),
    }
    metrics = {
        metric: {subject: recorded[name]}
        for metric, (subject, name) in sources.items()
        if name in recorded and math.isfinite(recorded[name])
    }
    if collect_return_judged(recorded.get("episode/count", 0), window):
        metrics[RETURN] = {COLLECT: recorded["episode/return_mean"]}
    return metrics


def evaluation_numbers(returns: list[float]) -> dict[str, float]:
    """The `eval/*` numbers of evaluation episodes' returns.

    Example:

    >>> evaluation_numbers([200.0, 100.0])["eval/return_mean"]
    150.0
    """
    return {
        "eval/return_mean": math.fsum(returns) / len(returns),
        "eval/return_min": min(returns),
        "eval/return_max": max(returns),
        "eval/episodes": float(len(returns)),
    }


def loss_numbers(loss_info: Any) -> dict[str, Any]:
    """What the agent's `LossInfo` says: PPO's clip fraction (a tensor; a
    Python 0.0 when clipping is off)."""
    clip = getattr(getattr(loss_info, "extra", None), "clip_fraction", None)
    if clip is None or isinstance(clip, float):
        return {}
    return {"policy/clip_fraction": clip}
