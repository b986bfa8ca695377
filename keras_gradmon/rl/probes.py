"""What the RL monitor measures in the graph, at summary steps only: the
policy statistics (entropy, KL, explained variance), the agent's value
estimates V(s), and the probes that run them before and after an update
(PPO's own).

The policy and value statistics, as TensorFlow functions of tensors.

Entropy, KL divergence, the approximate KL of SB3 and CleanRL, the
epsilon-greedy mixture and the explained variance. Every function works
inside a `tf.function` with AutoGraph off. Weighted means skip masked
entries (weight 0), e.g. the boundary steps of a trajectory batch.

Value estimates V(s) of a tf-agents agent, from its own networks.

| agent | V(s) |
|---|---|
| DqnAgent, DdqnAgent, CategoricalDqnAgent | `max_a Q(s, a)` (C51: the Q-values are the expectations over the support) |
| SacAgent (and CQL-SAC), Td3Agent | `min(Q1, Q2)(s, a)`, `a` from the agent's policy |
| DdpgAgent | `Q(s, mu(s))` |
| PPOAgent | the value network's `V(s)` |
| ReinforceAgent with a value network | its `V(s)` |

Any other agent: pass `value_fn=` to `RLHealthMonitor`.

In-graph measurements on a train batch, run at summary steps only.

`before(experience)` runs before the agent's update: the collect policy's
entropy (epsilon-greedy: of the epsilon-mixed distribution), the value
estimates on the batch and at the start states of recent episodes, and what
the KL needs. `after(experience, state)` runs after it: the KL between the
policy before and after the update. Both are `tf.function`s with AutoGraph
off, as tf-agents' `common.function`.

PPO's probe: tf-agents' own KL, the approximate KL over the batch's
actions, the explained variance of the value head, entropy over `[B, T]`.

Before the update, the batch is preprocessed as `PPOAgent.train` does
(`_preprocess`: value predictions of the value network before the update,
returns and advantages; skipped when the experience already holds them),
which gives the explained variance `1 - Var(return - value) / Var(return)`
over the valid steps (`ppo_utils.make_trajectory_mask`). After the update,
the KL between the collection policy (the batch's `dist_params`) and the
updated policy is tf-agents' `PPOAgent._kl_divergence`, the one its
adaptive KL penalty uses; the approximate KL is `mean((r - 1) - ln r)` with
`r = pi_new(a_t) / pi_old(a_t)` over the batch's actions, as SB3 and
CleanRL compute it.
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

#: Samples per state when an entropy has no closed form (e.g. SAC's
#: tanh-squashed normal): the estimate is -mean(log pi(a)), a ~ pi.
ENTROPY_SAMPLES = 8


def weighted_mean(values: tf.Tensor, weights: tf.Tensor | None = None) -> tf.Tensor:
    """`sum(w * v) / sum(w)`; the plain mean when `weights` is None."""
    values = tf.cast(values, tf.float32)
    if weights is None:
        return tf.reduce_mean(values)
    weights = tf.cast(tf.broadcast_to(weights, tf.shape(values)), tf.float32)
    return tf.math.divide_no_nan(
        tf.reduce_sum(values * weights), tf.reduce_sum(weights)
    )


def _safe_log(p: tf.Tensor) -> tf.Tensor:
    return tf.math.log(tf.where(p > 0, p, tf.ones_like(p)))


def categorical_entropy(probs: tf.Tensor) -> tf.Tensor:
    """`-sum_a p(a) ln p(a)` over the last axis (0 ln 0 = 0), in nats.

    Example:

    >>> float(categorical_entropy(tf.constant([0.5, 0.5])))  # doctest: +ELLIPSIS
    0.6931...
    """
    return -tf.reduce_sum(probs * _safe_log(probs), axis=-1)


def categorical_kl(before: tf.Tensor, after: tf.Tensor) -> tf.Tensor:
    """`KL(before || after) = sum_a p(a) (ln p(a) - ln q(a))`, last axis.

    Infinite where `after` gives 0 to an action `before` can take.
    """
    log_ratio = _safe_log(before) - tf.math.log(after)
    terms = tf.where(before > 0, before * log_ratio, tf.zeros_like(before))
    return tf.reduce_sum(terms, axis=-1)


def approx_kl(log_ratio: tf.Tensor, weights: tf.Tensor | None = None) -> tf.Tensor:
    """The approximate KL of SB3 and CleanRL: `mean((r - 1) - ln r)`.

    `r = pi_after(a) / pi_before(a)` for actions `a` drawn from
    `pi_before`, given as `ln r`. Each term is >= 0 and the mean is an
    unbiased estimate of `KL(before || after)` (Schulman's k3).
    """
    ratio_terms = tf.math.expm1(log_ratio) - log_ratio
    return weighted_mean(ratio_terms, weights)


def epsilon_greedy_probs(
    greedy_logits: tf.Tensor, epsilon: Any, allowed: tf.Tensor | None = None
) -> tf.Tensor:
    """The action distribution of epsilon-greedy: `(1 - eps) * onehot(argmax)
    + eps * uniform(allowed actions)`, over the last axis.

    Args:
        greedy_logits: The greedy policy's logits (Q-values), `[..., n]`.
        epsilon: The exploration probability, a scalar.
        allowed: Optional `[..., n]` mask of the actions random exploration
            picks from (tf-agents' action constraint or exploration mask).
    """
    n = tf.shape(greedy_logits)[-1]
    greedy = tf.one_hot(tf.argmax(greedy_logits, axis=-1), n, dtype=tf.float32)
    if allowed is None:
        allowed = tf.ones_like(greedy)
    allowed = tf.cast(tf.broadcast_to(allowed, tf.shape(greedy)), tf.float32)
    uniform = allowed / tf.reduce_sum(allowed, axis=-1, keepdims=True)
    epsilon = tf.cast(epsilon, tf.float32)
    return (1.0 - epsilon) * greedy + epsilon * uniform


def explained_variance(
    predicted: tf.Tensor, target: tf.Tensor, weights: tf.Tensor | None = None
) -> tf.Tensor:
    """`1 - Var(target - predicted) / Var(target)`; NaN when `Var(target)`
    is 0. 1 is a perfect value head, 0 no better than a constant, < 0 worse.
    """
    target = tf.cast(target, tf.float32)
    error = target - tf.cast(predicted, tf.float32)

    def variance(x: tf.Tensor) -> tf.Tensor:
        mean = weighted_mean(x, weights)
        return weighted_mean(tf.square(x - mean), weights)

    return 1.0 - variance(error) / variance(target)


def entropy_of(distribution: Any, outer_rank: int) -> tf.Tensor:
    """Entropy per outer element of a (nested) distribution, in nats.

    Analytic where tfp has it; otherwise `-mean(ln pi(a))` over
    `ENTROPY_SAMPLES` samples. Leaves are independent: their entropies add.
    """
    import tensorflow_probability as tfp

    total = []
    for leaf in tf.nest.flatten(distribution):
        try:
            if isinstance(leaf, tfp.distributions.Categorical):  # 0 ln 0 = 0
                entropy = categorical_entropy(leaf.probs_parameter())
            else:
                entropy = leaf.entropy()
        except NotImplementedError:
            samples = leaf.sample(ENTROPY_SAMPLES)
            entropy = -tf.reduce_mean(leaf.log_prob(samples), axis=0)
        entropy = tf.cast(entropy, tf.float32)
        rank = entropy.shape.rank
        total.append(tf.reduce_sum(entropy, axis=list(range(outer_rank, rank))))
    return tf.add_n(total)


def max_entropy(action_spec: Any) -> float | None:
    """`sum ln(number of actions)` over the discrete action elements, or
    None when an action is continuous (no maximum).

    Example:

    >>> from tf_agents.specs import tensor_spec  # doctest: +SKIP
    >>> max_entropy(tensor_spec.BoundedTensorSpec([], tf.int64, 0, 3))  # doctest: +SKIP
    1.3862943611198906
    """
    total = 0.0
    for spec in tf.nest.flatten(action_spec):
        if not spec.dtype.is_integer:
            return None
        counts = np.asarray(spec.maximum) - np.asarray(spec.minimum) + 1
        counts = np.broadcast_to(counts, tuple(spec.shape.as_list()))
        total += float(np.sum(np.log(counts.astype(np.float64))))
    return total


#: `value_fn(time_step) -> [N]`: the value estimate of each of N states.
ValueFn = Callable[[Any], tf.Tensor]


def time_steps(agent: Any, observation: Any, step_type: tf.Tensor) -> Any:
    """A TimeStep batch for the agent's policies (reward 0, discount 1)."""
    from tf_agents.trajectories import time_step as ts

    spec = agent.time_step_spec
    outer = tf.shape(step_type)

    def filled(leaf_spec: Any, value: float) -> tf.Tensor:
        shape = tf.concat([outer, tf.constant(leaf_spec.shape.as_list(), tf.int32)], 0)
        return tf.fill(shape, tf.constant(value, leaf_spec.dtype))

    return ts.TimeStep(
        step_type=step_type,
        reward=tf.nest.map_structure(lambda s: filled(s, 0.0), spec.reward),
        discount=filled(spec.discount, 1.0),
        observation=observation,
    )


def _outer_max(values: tf.Tensor) -> tf.Tensor:
    return tf.reduce_max(tf.reshape(values, [tf.shape(values)[0], -1]), axis=1)


def _q_agent(agent: Any) -> ValueFn:
    q_policy = agent.policy.wrapped_policy

    def value(time_step: Any) -> tf.Tensor:
        logits = q_policy.distribution(time_step).action.logits_parameter()
        return _outer_max(logits)

    return value


def _critic_agent(agent: Any, critics: list[Any]) -> ValueFn:
    def value(time_step: Any) -> tf.Tensor:
        action = agent.policy.action(time_step).action
        inputs = (time_step.observation, action)
        q = [
            critic(inputs, step_type=time_step.step_type, training=False)[0]
            for critic in critics
        ]
        return tf.reshape(tf.reduce_min(tf.stack(q), axis=0), [-1])

    return value


def _ppo_agent(agent: Any) -> ValueFn:
    policy = agent.collect_policy

    def value(time_step: Any) -> tf.Tensor:
        state = policy.get_initial_value_state(tf.shape(time_step.step_type)[0])
        values, _ = policy.apply_value_network(
            time_step.observation, time_step.step_type, value_state=state,
            training=False,
        )
        return values

    return value


def value_function(agent: Any) -> ValueFn | None:
    """The value estimate of `agent`'s kind (see the table above), or None.

    Example:

    >>> value = value_function(dqn_agent)  # doctest: +SKIP
    >>> value(time_steps(dqn_agent, observations, step_types))  # doctest: +SKIP
    """
    from tf_agents.agents.ddpg import ddpg_agent
    from tf_agents.agents.dqn import dqn_agent
    from tf_agents.agents.ppo import ppo_agent
    from tf_agents.agents.reinforce import reinforce_agent
    from tf_agents.agents.sac import sac_agent
    from tf_agents.agents.td3 import td3_agent

    if isinstance(agent, dqn_agent.DqnAgent):  # DDQN and C51 too
        return _q_agent(agent)
    if isinstance(agent, (sac_agent.SacAgent, td3_agent.Td3Agent)):
        return _critic_agent(agent, [agent._critic_network_1, agent._critic_network_2])
    if isinstance(agent, ddpg_agent.DdpgAgent):
        return _critic_agent(agent, [agent._critic_network])
    if isinstance(agent, ppo_agent.PPOAgent):
        return _ppo_agent(agent)
    if isinstance(agent, reinforce_agent.ReinforceAgent) and agent._value_network:
        network = agent._value_network
        return lambda time_step: network(
            time_step.observation, step_type=time_step.step_type, training=False
        )[0]
    return None


def discount_of(agent: Any) -> float | None:
    """The agent's discount factor (gamma), or None when it has none."""
    for name in ("_gamma", "_discount_factor"):
        value = getattr(agent, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


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
        self.max_entropy = max_entropy(agent.action_spec)
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
        probs = epsilon_greedy_probs(logits, epsilon, allowed)
        return tfp.distributions.Categorical(probs=probs), epsilon

    def _values(self, time_step: Any, weights: tf.Tensor) -> Numbers:
        if self.value_fn is None:
            return {}
        values = tf.cast(self.value_fn(time_step), tf.float32)
        masked = tf.where(weights > 0, values, tf.fill(tf.shape(values), -float("inf")))
        numbers = {
            "value/batch_mean": weighted_mean(values, weights),
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
            "value/start_estimate": weighted_mean(estimate),
            "value/start_return": weighted_mean(returns),
        }

    def _before(self, experience: Any) -> tuple[Numbers, Any]:
        time_step, weights = self._batch(experience)
        numbers = self._values(time_step, weights)
        distribution, epsilon = self._distribution(time_step)
        if distribution is None:  # no action distribution: no entropy, no KL
            return numbers, ()
        entropy = entropy_of(distribution, outer_rank=1)
        numbers["policy/entropy"] = weighted_mean(entropy, weights)
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
                kl.append(_sum_outer(categorical_kl(before["probs"], probs)))
                log_ratio.append(_sampled_log_ratio(before["probs"], probs))
            else:
                exact = False
                ratio = leaf.log_prob(before["actions"]) - before["log_prob"]
                log_ratio.append(_sum_outer(ratio))
        numbers = {"policy/approx_kl": approx_kl(tf.add_n(log_ratio), weights)}
        if exact:
            numbers["policy/kl"] = weighted_mean(tf.add_n(kl), weights)
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


class PPOProbe(PolicyProbe):
    """`PolicyProbe` for `PPOAgent` (PPOClipAgent, PPOKLPenaltyAgent)."""

    def _prepared(self, experience: Any) -> tuple[Any, Any, tf.Tensor]:
        from tf_agents.agents.ppo import ppo_utils

        processed = experience
        if "return" not in experience.policy_info:
            processed = self.agent._preprocess(experience)
        weights = ppo_utils.make_trajectory_mask(processed)
        return processed, _time_step(processed), weights

    def _policy(self, time_step: Any) -> Any:
        state = self.policy.get_initial_state(tf.shape(time_step.step_type)[0])
        return self.policy.distribution(time_step, state).action

    def _before(self, experience: Any) -> tuple[Numbers, Any]:
        processed, time_step, weights = self._prepared(experience)
        entropy = entropy_of(self._policy(time_step), outer_rank=2)
        values = processed.policy_info["value_prediction"]
        returns = processed.policy_info["return"]
        masked = tf.where(weights > 0, values, tf.fill(tf.shape(values), -float("inf")))
        numbers = {
            "policy/entropy": weighted_mean(entropy, weights),
            "policy/explained_variance": explained_variance(values, returns, weights),
            "value/batch_mean": weighted_mean(values, weights),
            "value/batch_max": tf.reduce_max(tf.cast(masked, tf.float32)),
        }
        if self.value_fn is not None:
            numbers.update(self._start_values())
        return numbers, weights

    def _after(self, experience: Any, weights: tf.Tensor) -> Numbers:
        from tf_agents.agents.ppo import ppo_utils
        from tf_agents.networks import network
        from tf_agents.utils import common

        agent = self.agent
        time_step = _time_step(experience)
        after = self._policy(time_step)
        old_params = experience.policy_info["dist_params"]
        kl = agent._kl_divergence(time_step, old_params, after)
        before = ppo_utils.distribution_from_spec(
            agent._action_distribution_spec,
            old_params,
            legacy_distribution_network=isinstance(
                agent._actor_net, network.DistributionNetwork
            ),
        )
        actions, spec = experience.action, agent.action_spec
        log_ratio = common.log_probability(after, actions, spec) - (
            common.log_probability(before, actions, spec)
        )
        return {
            "policy/kl": weighted_mean(kl, weights),
            "policy/approx_kl": approx_kl(log_ratio, weights),
        }


def _time_step(experience: Any) -> Any:
    from tf_agents.trajectories import time_step as ts

    return ts.TimeStep(
        step_type=experience.step_type,
        reward=experience.reward,
        discount=experience.discount,
        observation=experience.observation,
    )
