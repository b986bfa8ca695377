"""Progress and throughput, measured on the host between summaries.

Pure Python. Training intensity (replay ratio) follows the seed document:
`batch size x train steps / environment steps`, how many times each
collected transition has been trained on, on average.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Progress:
    """Counts and rates at successive summaries.

    Attributes:
        start: `time.perf_counter()` when measuring began.
        last: `(time, env_steps, train_steps)` at the previous summary.

    Example:

    >>> progress = Progress(start=0.0)
    >>> progress.numbers(10.0, env_steps=1000, train_steps=500, batch_size=64)
    {'progress/env_steps': 1000.0, 'progress/train_steps': 500.0, \
'progress/wall_time': 10.0, 'progress/training_intensity': 32.0}
    >>> progress.numbers(12.0, env_steps=1400, train_steps=900, batch_size=64)[
    ...     "progress/env_steps_per_sec"]
    200.0
    """

    start: float
    last: tuple[float, int, int] | None = None

    def numbers(
        self, now: float, env_steps: int, train_steps: int, batch_size: int | None
    ) -> dict[str, float]:
        """The progress numbers at a summary taken at time `now`."""
        numbers = {
            "progress/env_steps": float(env_steps),
            "progress/train_steps": float(train_steps),
            "progress/wall_time": now - self.start,
        }
        if self.last is not None and now > self.last[0]:
            elapsed = now - self.last[0]
            numbers["progress/env_steps_per_sec"] = (env_steps - self.last[1]) / elapsed
            numbers["progress/updates_per_sec"] = (train_steps - self.last[2]) / elapsed
        if batch_size is not None and env_steps > 0:
            intensity = batch_size * train_steps / env_steps
            numbers["progress/training_intensity"] = intensity
        self.last = (now, env_steps, train_steps)
        return numbers


def transitions_per_batch(step_type_shape: list[int]) -> int:
    """Transitions in a train batch of this outer shape: `B x (T - 1)` for
    `[B, T]` trajectories (a `[64, 2]` DQN batch is 64 transitions), `B` for
    `[B]`.

    Example:

    >>> transitions_per_batch([64, 2]), transitions_per_batch([32])
    (64, 32)
    """
    if len(step_type_shape) >= 2 and step_type_shape[1] > 1:
        return step_type_shape[0] * (step_type_shape[1] - 1)
    return step_type_shape[0]
