"""PPO's probe: tf-agents' own KL, the approximate KL over the batch's
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
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_gradmon.rl import distributions as D
from keras_gradmon.rl.probes import Numbers, PolicyProbe


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
        entropy = D.entropy_of(self._policy(time_step), outer_rank=2)
        values = processed.policy_info["value_prediction"]
        returns = processed.policy_info["return"]
        masked = tf.where(weights > 0, values, tf.fill(tf.shape(values), -float("inf")))
        numbers = {
            "policy/entropy": D.weighted_mean(entropy, weights),
            "policy/explained_variance": D.explained_variance(values, returns, weights),
            "value/batch_mean": D.weighted_mean(values, weights),
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
            "policy/kl": D.weighted_mean(kl, weights),
            "policy/approx_kl": D.approx_kl(log_ratio, weights),
        }


def _time_step(experience: Any) -> Any:
    from tf_agents.trajectories import time_step as ts

    return ts.TimeStep(
        step_type=experience.step_type,
        reward=experience.reward,
        discount=experience.discount,
        observation=experience.observation,
    )
