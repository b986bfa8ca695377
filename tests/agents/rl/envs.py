"""Deterministic environments whose returns and values are known exactly."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts


class ChainEnv(py_environment.PyEnvironment):
    """Episodes of scripted lengths; reward `reward(episode, t)` at step t.

    The observation is `[gamma ** steps_left, steps_left, episode]`: with a
    constant reward r, the discounted return from a state is
    `r (1 - gamma ** steps_left) / (1 - gamma)`, linear in the first entry.
    Actions (2 discrete ones, or a 2-vector in [-1, 1] when `continuous`)
    change nothing. The last step has discount 0.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        reward: Callable[[int, int], float] = lambda episode, t: 1.0,
        gamma: float = 0.9,
        continuous: bool = False,
    ) -> None:
        super().__init__(handle_auto_reset=True)  # LAST -> FIRST on the next step
        self.lengths, self.reward, self.gamma = list(lengths), reward, gamma
        self.continuous = continuous
        self.episode, self.t = -1, 0

    def observation_spec(self):
        return array_spec.ArraySpec((3,), np.float32, name="observation")

    def action_spec(self):
        if self.continuous:
            return array_spec.BoundedArraySpec((2,), np.float32, -1.0, 1.0, "action")
        return array_spec.BoundedArraySpec((), np.int64, 0, 1, name="action")

    def length(self, episode: int) -> int:
        return self.lengths[episode % len(self.lengths)]

    def _observation(self) -> np.ndarray:
        left = self.length(self.episode) - self.t
        return np.array([self.gamma**left, left, self.episode], np.float32)

    def _reset(self):
        self.episode, self.t = self.episode + 1, 0
        return ts.restart(self._observation())

    def _step(self, action):
        reward = np.float32(self.reward(self.episode, self.t))
        self.t += 1
        if self.t == self.length(self.episode):
            return ts.termination(self._observation(), reward)
        return ts.transition(self._observation(), reward, discount=1.0)


def completed_episodes(
    envs: Sequence[ChainEnv], driver_steps: int
) -> list[tuple[int, float, float, int, np.ndarray]]:
    """`(env index, return, discounted return, length, start observation)`
    of the episodes completed within `driver_steps` steps of every env, in
    completion order (step, then env index), from the scripts alone.

    Episode i of an env ends at its step `sum_{k<i} (L_k + 1) + L_i - 1`
    (0-based): each episode takes L steps, and the step after its last is
    the boundary step (LAST -> FIRST) that resets.
    """
    done = []
    for j, env in enumerate(envs):
        start = 0
        for i in range(driver_steps):
            length = env.length(i)
            end = start + length - 1
            if end >= driver_steps:
                break
            rewards = np.array([env.reward(i, t) for t in range(length)], np.float32)
            rewards = rewards.astype(np.float64)
            weights = np.float64(env.gamma) ** np.arange(length)
            start_obs = np.array([env.gamma**length, length, i], np.float32)
            done.append((end, j, rewards.sum(), (weights * rewards).sum(), length,
                         start_obs))
            start = end + 2
    done.sort(key=lambda e: (e[0], e[1]))
    return [e[1:] for e in done]


def boundary_steps(env: ChainEnv, horizon: int) -> set[int]:
    """The steps (0-based) at which `env` emits a boundary (LAST -> FIRST)."""
    steps, start, episode = set(), 0, 0
    while start < horizon:
        end = start + env.length(episode) - 1
        steps.add(end + 1)
        start, episode = end + 2, episode + 1
    return steps


def driver_steps(envs: Sequence[ChainEnv], runs: int, num_steps: int) -> list[int]:
    """Steps each env has taken after each of `runs` `DynamicStepDriver` runs
    of `num_steps`: a run steps every env at once until it has counted
    `num_steps` non-boundary steps over the batch."""
    horizon = 4 * runs * num_steps + 10
    boundaries = [boundary_steps(env, horizon) for env in envs]
    taken, ends = 0, []
    for _ in range(runs):
        counted = 0
        while counted < num_steps:
            counted += sum(taken not in b for b in boundaries)
            taken += 1
        ends.append(taken)
    return ends
