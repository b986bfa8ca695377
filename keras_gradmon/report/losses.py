"""A run's final loss: Keras's `epoch_loss`, or tf-agents' `Losses/*` tags.

tf-agents' agents write their losses with
`tf.compat.v2.summary.scalar(name=..., ...)` under `tf.name_scope('Losses/')`
(SAC and CQL-SAC: `'Losses'`), so the tags are `Losses/<name>`. What they
write differs by agent:

- DQN, DDQN, categorical DQN, REINFORCE, behavioral cloning and every agent
  on `TFAgent`'s default summaries: the parts and `Losses/total_loss`;
- the bandit agents: one `Losses/loss`;
- DDPG, TD3, SAC, CQL-SAC and PPO: only the parts (`critic_loss`,
  `actor_loss`, `alpha_loss`, ...; PPO also `entropy`, which is not a loss,
  and `total_abs_loss`, the sum of the parts' absolute values).

So the final loss is, in this order: Keras's `epoch_loss` (or `loss`); the
last `Losses/total_loss`; the last `Losses/loss`; else the sum of the
`Losses/<name>_loss` parts (not `total_abs_loss`) at the last step they all
recorded, which is the `LossInfo.loss` that DDPG, SAC and PPO return. The
parts are listed with the sum, so a total an agent weights differently
(CQL-SAC weights `cql_loss` by `cql_alpha`; TD3 writes no `critic_loss`)
can be read from them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from keras_gradmon.alerts.events import format_number
from keras_gradmon.report.events import Run

#: tf-agents' name scope of the loss summaries.
LOSSES = "Losses"
#: The tf-agents tags that are the total loss, first found first.
TOTALS = ("total_loss", "loss")
#: `Losses/` tags that are not parts of the total.
NOT_PARTS = ("total_abs_loss",)
#: Keras's loss tags (the `TensorBoard` callback), first found first.
KERAS = ("epoch_loss", "loss")
#: `FinalLoss.source` of a sum of parts.
SUM = "sum"


@dataclasses.dataclass(frozen=True)
class FinalLoss:
    """The final loss of a run, and where it comes from.

    Attributes:
        value: The loss.
        step: The step it was recorded at.
        source: Its tag (`epoch_loss`, `Losses/total_loss`, ...), or `SUM`.
        parts: The other `Losses/` values at `step` (with a total), or the
            summed parts (with `SUM`), by name.
    """

    value: float
    step: int
    source: str
    parts: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def description(self) -> str:
        """The report's line, e.g. `final loss: 0.52 (tf-agents ...)`."""
        line = f"final loss: {format_number(self.value)}"
        parts = ", ".join(
            f"{name} {format_number(value)}" for name, value in self.parts.items()
        )
        if self.source == SUM:
            return f"{line} (sum of tf-agents {LOSSES}/ at step {self.step}: {parts})"
        if self.source.startswith(f"{LOSSES}/"):
            where = f"tf-agents {self.source} at step {self.step}"
            return f"{line} ({where}; {parts})" if parts else f"{line} ({where})"
        return line


def tf_agents_losses(run: Run) -> dict[str, dict[int, float]]:
    """`{name: {step: value}}` of the run's `Losses/<name>` tags."""
    found = {}
    for name, points in run.scalars.items():
        scope, _, rest = name.partition("/")
        if scope == LOSSES and rest and "/" not in rest:
            found[rest] = points
    return found


def _at(
    losses: dict[str, dict[int, float]], step: int, names: Iterable[str]
) -> dict[str, float]:
    return {name: losses[name][step] for name in sorted(names) if step in losses[name]}


def _total(losses: dict[str, dict[int, float]]) -> FinalLoss | None:
    for name in TOTALS:
        if losses.get(name):
            step = max(losses[name])
            others = _at(losses, step, set(losses) - {name})
            return FinalLoss(losses[name][step], step, f"{LOSSES}/{name}", others)
    return None


def _sum_of_parts(losses: dict[str, dict[int, float]]) -> FinalLoss | None:
    names = [
        name
        for name, points in losses.items()
        if name.endswith("_loss") and name not in NOT_PARTS and points
    ]
    if not names:
        return None
    common = set.intersection(*(set(losses[name]) for name in names))
    step = max(common) if common else max(max(losses[name]) for name in names)
    parts = _at(losses, step, names)
    return FinalLoss(sum(parts.values()), step, SUM, parts)


def final_loss(run: Run) -> FinalLoss | None:
    """The run's final loss (see the module's docstring), or None."""
    for name in KERAS:
        points = run.scalars.get(name)
        if points:
            step = max(points)
            return FinalLoss(points[step], step, name)
    losses = tf_agents_losses(run)
    return _total(losses) or _sum_of_parts(losses)
