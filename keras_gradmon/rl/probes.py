"""In-graph measurements on a train batch, run at summary steps only.

`before(experience)` runs before the agent's update: the collect policy's
entropy (epsilon-greedy: of the epsilon-mixed distribution), the value
estimates on the batch and at the start states of recent episodes, and what
the KL needs. `after(experience, state)` runs after it: the KL between the
policy before and after the update. Both are `tf.function`s with AutoGraph
off, as tf-agents' `common.function`.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_gradmon.rl import distributions as D
from keras_gradmon.rl.values import ValueFn, time_steps

Numbers = dict[str, tf.Tensor]


def _flatten(x: tf.Tensor, outer_rank: int) -> tf.Tensor:
    if outer_rank == 1:
        return x
    return tf.reshape(x, tf.concat([[-1], tf.shape(x)[outer_rank:]], 0))


def _categorical(leaf: Any) -> bool:
    import tensorflow_probability as tfp

    return isinstance(leaf, tfp.distributions.Categorical)


class PolicyProbe:
    """Measures the collect policy and the value estimate of an agent.

    Args:
        agent: The tf-agents agent.
        value_fn: `value_fn(time_step) -> [N]`, or None for no value.
        observer: An `EpisodeObserver` holding start states, or None.
        kl: Whether `after` measures the KL over the update.
    """

    def __init__(
        self, agent: Any, value_fn: ValueFn | None, observer: Any, kl: bool
    ) -> None:
        self.agent = agent
        self.policy = agent.collect_policy
        self.value_fn = value_fn
        self.observer = observer
        self.kl = kl
        self.max_entropy = D.max_entropy(agent.action_spec)
        self.before = tf.function(self._before, autograph=False, reduce_retracing=True)
        self.after = tf.function(self._after, autograph=False, reduce_retracing=True)

    def _batch(self, experience: Any) -> tuple[Any, tf.Tensor]:
        """The batch as `[N]` time steps, and weights (0 for terminal states)."""
        rank = experience.step_type.shape.rank
        flat = tf.nest.map_structure(lambda x: _flatten(x, rank), experience)
        step = time_steps(self.agent, flat.observation, flat.step_type)
        return step, tf.cast(~step.is_last(), tf.float32)

    def _distribution(self, time_step: Any) -> tuple[Any, tf.Tensor | None]:
        """The collect policy's action distribution, and its epsilon."""
        import tensorflow_probability as tfp
        from tf_agents.policies import epsilon_greedy_policy

        policy = self.policy
        if not isinstance(policy, epsilon_greedy_policy.EpsilonGreedyPolicy):
            try:
                return policy.distribution(time_step).action, None
            except NotImplementedError:  # e.g. DDPG's OU noise, TD3's Gaussian
                return None, None
        logits = policy.wrapped_policy.distribution(time_step).action
        logits = tf.nest.flatten(logits)[0].logits_parameter()
        allowed = None
        splitter = policy.observation_and_action_constraint_splitter
        if splitter is not None:
            allowed = splitter(time_step.observation)[1]
        if policy._exploration_mask is not None:
            mask = tf.constant(policy._exploration_mask, tf.float32)
            allowed = mask if allowed is None else tf.cast(allowed, tf.float32) * mask
        epsilon = tf.cast(policy._get_epsilon(), tf.float32)
        probs = D.epsilon_greedy_probs(logits, epsilon, allowed)
        return tfp.distributions.Categorical(probs=probs), epsilon

    def _values(self, time_step: Any, weights: tf.Tensor) -> Numbers:
        if self.value_fn is None:
            return {}
        values = tf.cast(self.value_fn(time_step), tf.float32)
        masked = tf.where(weights > 0, values, tf.fill(tf.shape(values), -float("inf")))
        numbers = {
            "value/batch_mean": D.weighted_mean(values, weights),
            "value/batch_max": tf.reduce_max(masked),
        }
        return {**numbers, **self._start_values()}

    def _start_values(self) -> Numbers:
        if self.observer is None or self.observer.observation_spec is None:
            return {}
        observations, returns = self.observer.start_states()
        first = tf.zeros(tf.shape(returns), tf.int32)
        step = time_steps(self.agent, observations, first)
        estimate = tf.cast(self.value_fn(step), tf.float32)
        return {
            "value/start_estimate": D.weighted_mean(estimate),
            "value/start_return": D.weighted_mean(returns),
        }

    def _before(self, experience: Any) -> tuple[Numbers, Any]:
        time_step, weights = self._batch(experience)
        numbers = self._values(time_step, weights)
        distribution, epsilon = self._distribution(time_step)
        if distribution is None:  # no action distribution: no entropy, no KL
            return numbers, ()
        entropy = D.entropy_of(distribution, outer_rank=1)
        numbers["policy/entropy"] = D.weighted_mean(entropy, weights)
        if epsilon is not None:
            numbers["policy/epsilon"] = epsilon
        return numbers, self._kl_state(distribution) if self.kl else ()

    def _kl_state(self, distribution: Any) -> tuple:
        """What the KL needs of the policy before the update, per leaf:
        a categorical's probabilities, or else actions drawn from it and
        their log-probabilities."""
        state = []
        for leaf in tf.nest.flatten(distribution):
            if _categorical(leaf):
                state.append({"probs": leaf.probs_parameter()})
            else:
                actions = leaf.sample()
                state.append({"actions": actions, "log_prob": leaf.log_prob(actions)})
        return tuple(state)

    def _after(self, experience: Any, state: tuple) -> Numbers:
        if not state:
            return {}
        time_step, weights = self._batch(experience)
        distribution, _ = self._distribution(time_step)
        kl, log_ratio, exact = [], [], True
        for leaf, before in zip(tf.nest.flatten(distribution), state):
            if "probs" in before:
                probs = leaf.probs_parameter()
                kl.append(_sum_outer(D.categorical_kl(before["probs"], probs)))
                log_ratio.append(_sampled_log_ratio(before["probs"], probs))
            else:
                exact = False
                ratio = leaf.log_prob(before["actions"]) - before["log_prob"]
                log_ratio.append(_sum_outer(ratio))
        numbers = {"policy/approx_kl": D.approx_kl(tf.add_n(log_ratio), weights)}
        if exact:
            numbers["policy/kl"] = D.weighted_mean(tf.add_n(kl), weights)
        return numbers


def _sampled_log_ratio(before: tf.Tensor, after: tf.Tensor) -> tf.Tensor:
    """`ln(after(a) / before(a))` for one action `a ~ before` per element,
    summed per outer element (first axis)."""
    count = tf.shape(before)[-1]
    flat_before = tf.reshape(before, [-1, count])
    flat_after = tf.reshape(after, [-1, count])
    actions = tf.random.categorical(tf.math.log(flat_before), 1)[:, 0]
    ratio = tf.math.log(tf.gather(flat_after, actions, batch_dims=1)) - tf.math.log(
        tf.gather(flat_before, actions, batch_dims=1)
    )
    return _sum_outer(tf.reshape(ratio, [tf.shape(before)[0], -1]))


def _sum_outer(values: tf.Tensor) -> tf.Tensor:
    """Sums a per-element quantity over all but the first axis."""
    return tf.reduce_sum(tf.reshape(values, [tf.shape(values)[0], -1]), axis=1)
