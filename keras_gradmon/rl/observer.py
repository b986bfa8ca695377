"""`EpisodeObserver`: episode returns and lengths, tracked inside the driver.

A tf-agents driver observer, like `tf_metrics.AverageReturnMetric`, but one
object for every episode statistic: it works on batched environments, traces
into the driver's `tf.function` (no AutoGraph needed: no Python control flow
on tensors) and keeps the last `window` completed episodes in a ring buffer.
"""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

from keras_gradmon import validation

# Columns of the per-environment accumulator: the current episode's return,
# discounted return and length, and the environment's counted steps and
# completed episodes so far.
_RETURN, _DISCOUNTED, _LENGTH, _STEPS, _EPISODES = range(5)
# Multiplies the accumulator where an episode starts: zero the episode.
_RESTART = ((0.0, 0.0, 0.0, 1.0, 1.0),)
_LAST = 2  # ts.StepType.LAST


def _check(batch_size: Any, window: Any, discount: Any, threshold: Any) -> None:
    validation.positive_int("batch_size", batch_size)
    validation.positive_int("window", window)
    validation.in_closed_range("discount", discount, 0.0, 1.0)
    if threshold is not None and not (
        isinstance(threshold, (int, float))
        and not isinstance(threshold, bool)
        and math.isfinite(threshold)
    ):
        raise ValueError(
            "`solve_threshold` must be a finite number or None. "
            f"Received: solve_threshold={threshold!r}"
        )


class EpisodeObserver(tf.Module):
    """Tracks each episode's return, discounted return and length.

    Add it to a driver's observers. Each call takes a batch of trajectories
    (`[batch_size]` outer shape, one per environment): rewards add up per
    environment, an episode starts at `is_first()` and is complete at
    `is_last()`, boundary steps (`LAST -> FIRST`) count for nothing. The
    last `window` complete episodes are kept; `result()` summarizes them.

    The discounted return of an episode is `sum_t discount**t r_t`, the
    Monte-Carlo return that a value network trained with that discount
    estimates at the episode's start state (tf-agents environments give a
    discount of 1 inside an episode and 0 at its end, so this is also the
    discounted return with the environment's discounts).

    Each step costs a dozen small ops in the driver's graph; recording the
    finished episodes (and the start observations) happens only on the
    steps where an episode ends (starts).

    Args:
        batch_size: The environment's batch size (`env.batch_size`).
        window: How many recent episodes the statistics cover.
        discount: The agent's discount factor (gamma), in [0, 1].
        solve_threshold: A return counting as "solved" (`solve_rate`).
        observation_spec: When given, each episode's start observation is
            kept too, for the value-against-return comparison.
        name: The module name.

    Example:

    ```python
    observer = EpisodeObserver(batch_size=env.batch_size, solve_threshold=195)
    driver = DynamicStepDriver(env, policy, observers=[buffer.add_batch, observer])
    driver.run = common.function(driver.run)
    ...
    stats = observer.result()   # {"return_mean": ..., "length_max": ...}
    ```
    """

    def __init__(
        self,
        batch_size: int = 1,
        window: int = 100,
        discount: float = 1.0,
        solve_threshold: float | None = None,
        observation_spec: Any = None,
        name: str = "episode_observer",
    ) -> None:
        _check(batch_size, window, discount, solve_threshold)
        super().__init__(name=name)
        self.batch_size, self.window = batch_size, window
        self.discount = float(discount)
        self.solve_threshold = solve_threshold
        self.observation_spec = observation_spec
        self._accumulator = tf.Variable(
            tf.zeros([batch_size, 5], tf.float64), trainable=False, name="accumulator"
        )
        self._episodes = tf.Variable(
            tf.zeros([window, 3], tf.float64), trainable=False, name="episodes"
        )
        self._start, self._starts = None, None
        if observation_spec is not None:
            self._start = tf.nest.map_structure(
                lambda s: self._zeros([batch_size], s, "start"), observation_spec
            )
            self._starts = tf.nest.map_structure(
                lambda s: self._zeros([window], s, "starts"), observation_spec
            )

    @staticmethod
    def _zeros(outer: list[int], spec: Any, name: str) -> tf.Variable:
        shape = outer + list(spec.shape)
        return tf.Variable(tf.zeros(shape, spec.dtype), trainable=False, name=name)

    @property
    def episodes(self) -> tf.Tensor:
        """Episodes completed so far (int64)."""
        return self._count(_EPISODES)

    @property
    def env_steps(self) -> tf.Tensor:
        """Environment steps so far, boundary steps excluded (int64)."""
        return self._count(_STEPS)

    def _count(self, column: int) -> tf.Tensor:
        return tf.cast(tf.reduce_sum(self._accumulator[:, column]), tf.int64)

    def __call__(self, trajectory: Any) -> Any:
        """Observes one batch of trajectories; returns it (for chaining)."""
        self._observe(trajectory)
        return trajectory

    def _check_batch(self, trajectory: Any) -> None:
        batch = trajectory.step_type.shape[:1].num_elements()
        if batch is not None and batch != self.batch_size:
            raise ValueError(
                f"This EpisodeObserver was made for batch_size={self.batch_size} "
                f"environments, and the trajectories have batch size {batch}: "
                "pass the environment's `batch_size`. Received: trajectory with "
                f"step_type shape {trajectory.step_type.shape}"
            )

    @tf.function(autograph=False)
    def _observe(self, trajectory: Any) -> None:
        self._check_batch(trajectory)
        first = tf.equal(trajectory.step_type, 0)
        last = tf.equal(trajectory.next_step_type, _LAST)
        inside = tf.cast(tf.not_equal(trajectory.step_type, _LAST), tf.float64)
        reward = tf.cast(trajectory.reward, tf.float64)
        if reward.shape.rank != 1:  # a reward vector: its sum
            reward = tf.reduce_sum(tf.reshape(reward, [self.batch_size, -1]), 1)
        reward *= inside
        restart = tf.where(first[:, None], tf.constant(_RESTART, tf.float64), 1.0)
        accumulator = self._accumulator * restart
        weight = tf.pow(tf.constant(self.discount, tf.float64), accumulator[:, _LENGTH])
        ended = tf.cast(last, tf.float64)
        step = tf.stack([reward, weight * reward, inside, inside, ended], axis=1)
        accumulator += step
        self._accumulator.assign(accumulator)
        # One branch for the rare steps where an episode starts or ends.
        edge = last if self._start is None else tf.logical_or(first, last)
        tf.cond(
            tf.reduce_any(edge),
            lambda: self._edges(first, last, trajectory.observation, accumulator),
            tf.no_op,
        )

    def _edges(
        self, first: tf.Tensor, last: tf.Tensor, observation: Any, accumulator: Any
    ) -> tf.Operation:
        """Keeps the start observations of the episodes starting now, then
        writes the episodes ending now into the ring buffer."""
        updates = []
        if self._start is not None:
            updates = [
                v.assign(_where_rows(first, tf.cast(o, v.dtype), v))
                for v, o in zip(
                    tf.nest.flatten(self._start), tf.nest.flatten(observation)
                )
            ]
        with tf.control_dependencies(updates):
            return self._complete(last, accumulator)

    def _complete(self, last: tf.Tensor, accumulator: tf.Tensor) -> tf.Operation:
        """Writes the episodes ending now into the ring buffer."""
        ended = tf.cast(last, tf.float64)
        index = tf.where(last)[:, 0]
        count = tf.size(index, out_type=tf.int64)
        keep = tf.minimum(count, self.window)
        index = index[count - keep :]
        before = tf.reduce_sum(accumulator[:, _EPISODES] - ended)
        first_slot = tf.cast(before, tf.int64) + count - keep
        slots = tf.math.floormod(first_slot + tf.range(keep), self.window)[:, None]
        rows = tf.gather(accumulator, index)
        updates = [
            self._episodes.scatter_nd_update(
                slots, tf.gather(rows, [_RETURN, _DISCOUNTED, _LENGTH], axis=1)
            )
        ]
        if self._start is not None:
            updates += [
                buffer.scatter_nd_update(slots, tf.gather(start, index))
                for buffer, start in zip(
                    tf.nest.flatten(self._starts), tf.nest.flatten(self._start)
                )
            ]
        return tf.group(updates)

    @tf.function(autograph=False)
    def result(self) -> dict[str, tf.Tensor]:
        """The statistics of the last `window` episodes (float64 scalars).

        Returns:
            `count` (episodes so far), `env_steps`, and over the last
            `min(count, window)` episodes `return_mean`, `return_std` (ddof
            0), `return_min`, `return_max`, `return_median`,
            `discounted_return_mean`, `length_mean`, `length_max`, and
            `solve_rate` when a `solve_threshold` was given. The statistics
            are meaningless while `count` is 0.
        """
        kept = self._kept()
        episodes = self._episodes[: tf.maximum(kept, 1)]
        returns, discounted, lengths = tf.unstack(episodes, axis=1)
        ordered = tf.sort(returns)
        size = tf.shape(ordered, out_type=tf.int64)[0]
        median = 0.5 * (
            tf.gather(ordered, (size - 1) // 2) + tf.gather(ordered, size // 2)
        )
        result = {
            "count": tf.reduce_sum(self._accumulator[:, _EPISODES]),
            "env_steps": tf.reduce_sum(self._accumulator[:, _STEPS]),
            "return_mean": tf.reduce_mean(returns),
            "return_std": tf.math.reduce_std(returns),
            "return_min": tf.reduce_min(returns),
            "return_max": tf.reduce_max(returns),
            "return_median": median,
            "discounted_return_mean": tf.reduce_mean(discounted),
            "length_mean": tf.reduce_mean(lengths),
            "length_max": tf.reduce_max(lengths),
        }
        if self.solve_threshold is not None:
            solved = tf.cast(returns >= self.solve_threshold, tf.float64)
            result["solve_rate"] = tf.reduce_mean(solved)
        return result

    def _kept(self) -> tf.Tensor:
        return tf.minimum(self._count(_EPISODES), self.window)

    def start_states(self) -> tuple[Any, tf.Tensor]:
        """`(observations, discounted returns)` of the kept episodes' starts,
        oldest first.

        Graph-friendly (call it inside a `tf.function`); empty while no
        episode is complete.

        Raises:
            ValueError: The observer was made without `observation_spec`.
        """
        if self._starts is None:
            raise ValueError(
                "`start_states()` needs the start observations: create the "
                "observer with `observation_spec=`. Received: "
                "observation_spec=None"
            )
        kept = self._kept()
        oldest = self._count(_EPISODES) - kept
        slots = tf.math.floormod(oldest + tf.range(kept), self.window)
        observations = tf.nest.map_structure(
            lambda v: tf.gather(v, slots), self._starts
        )
        return observations, tf.gather(self._episodes[:, 1], slots)

    def reset(self) -> None:
        """Forgets every episode and count."""
        self._accumulator.assign(tf.zeros_like(self._accumulator))
        self._episodes.assign(tf.zeros_like(self._episodes))


def _where_rows(condition: tf.Tensor, new: tf.Tensor, old: tf.Tensor) -> tf.Tensor:
    """`new` where `condition` (one bool per row), else `old`."""
    shape = tf.concat(
        [tf.shape(condition), tf.ones([tf.rank(new) - 1], tf.int32)], axis=0
    )
    return tf.where(tf.reshape(condition, shape), new, old)
