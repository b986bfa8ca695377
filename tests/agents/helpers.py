"""A small DqnAgent on a synthetic batch, monitored or not; and every
tf-agents agent that takes an optimizer, for the agents x optimizer kinds
matrix (`AGENT_CASES`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from tf_agents.agents.behavioral_cloning import behavioral_cloning_agent
from tf_agents.agents.categorical_dqn import categorical_dqn_agent
from tf_agents.agents.cql import cql_sac_agent
from tf_agents.agents.ddpg import actor_network, critic_network, ddpg_agent
from tf_agents.agents.dqn import dqn_agent
from tf_agents.agents.ppo import (
    ppo_agent,
    ppo_clip_agent,
    ppo_kl_penalty_agent,
    ppo_utils,
)
from tf_agents.agents.reinforce import reinforce_agent
from tf_agents.agents.sac import sac_agent, tanh_normal_projection_network
from tf_agents.agents.td3 import td3_agent
from tf_agents.distributions import utils as distribution_utils
from tf_agents.networks import (
    actor_distribution_network,
    categorical_q_network,
    network,
    q_network,
    value_network,
)
from tf_agents.specs import distribution_spec, tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.utils import common, value_ops

import keras_gradmon
from keras_gradmon.integrations import tf_agents as tf_agents_integration

OBS = tensor_spec.TensorSpec([6], tf.float32)
ACTIONS = tensor_spec.BoundedTensorSpec([], tf.int64, 0, 2)
BATCH = 8


def make_agent(
    monitored: bool,
    counter_aggregation: tf.VariableAggregation = tf.VariableAggregation.NONE,
    **options: Any,
) -> tuple[dqn_agent.DqnAgent, Any]:
    """A DqnAgent with fixed initial weights, and its optimizer.

    The monitor's step is the agent's (int64) `train_step_counter` unless
    `step=` is among `options`. Under a strategy tf-agents needs the counter
    aggregated `ONLY_FIRST_REPLICA` (`counter_aggregation`).
    """
    tf.random.set_seed(0)
    network = q_network.QNetwork(OBS, ACTIONS, fc_layer_params=(16, 8))
    optimizer = tf.keras.optimizers.Adam(1e-2)
    counter = tf.Variable(0, dtype=tf.int64, aggregation=counter_aggregation)
    if monitored:
        options.setdefault("step", counter)
        optimizer = keras_gradmon.GradientMonitorOptimizer(optimizer, **options)
    agent = dqn_agent.DqnAgent(
        ts.time_step_spec(OBS),
        ACTIONS,
        q_network=network,
        optimizer=optimizer,
        td_errors_loss_fn=common.element_wise_squared_loss,
        train_step_counter=counter,
    )
    agent.initialize()
    return agent, optimizer


def make_batch(seed: int = 0) -> trajectory.Trajectory:
    """A `[BATCH, 2]` trajectory batch of random transitions."""
    rng = np.random.default_rng(seed)
    return trajectory.Trajectory(
        step_type=tf.zeros([BATCH, 2], tf.int32),
        observation=tf.constant(rng.normal(size=(BATCH, 2, 6)).astype("float32")),
        action=tf.constant(rng.integers(0, 3, (BATCH, 2))),
        policy_info=(),
        next_step_type=tf.ones([BATCH, 2], tf.int32),
        reward=tf.constant(rng.normal(size=(BATCH, 2)).astype("float32")),
        discount=tf.ones([BATCH, 2]),
    )


def loss_gradients(agent: dqn_agent.DqnAgent, experience: Any) -> dict[str, np.ndarray]:
    """`{variable name: gradient}` of the DQN loss, computed apart from training."""
    variables = agent._q_network.trainable_weights
    with tf.GradientTape() as tape:
        loss = agent._loss(experience, training=True).loss
    grads = tape.gradient(loss, variables)
    return {v.name[:-2]: g.numpy() for v, g in zip(variables, grads)}


# The agents x optimizer kinds matrix ------------------------------------------
# Every tf-agents agent that takes an optimizer, built with tiny networks, with
# its losses in the order its train step applies them (to recompute the
# gradients of a train step apart from training).

CONTINUOUS = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0)

#: The optimizer kinds, each made fresh.
OPTIMIZER_KINDS: dict[str, Callable[[], Any]] = {
    "v1": lambda: tf.compat.v1.train.AdamOptimizer(1e-2),
    "tf_keras": lambda: tf.keras.optimizers.Adam(1e-2),
    "tf_keras_legacy": lambda: tf.keras.optimizers.legacy.Adam(1e-2),
}

#: The agent attribute holding the optimizer of each constructor argument.
OPTIMIZER_ATTRIBUTES = {
    "optimizer": "_optimizer",
    "actor_optimizer": "_actor_optimizer",
    "critic_optimizer": "_critic_optimizer",
    "alpha_optimizer": "_alpha_optimizer",
}


class _MeanSampleNormal(tfp.distributions.MultivariateNormalDiag):
    """A MultivariateNormalDiag whose samples are its mean (log_prob as usual):
    SAC's losses become deterministic, so a train step's gradients can be
    recomputed apart from it."""

    def _call_sample_n(self, sample_shape: Any, seed: Any, **kwargs: Any) -> tf.Tensor:
        del seed, kwargs
        outer = tf.reshape(tf.cast(sample_shape, tf.int32), [-1])
        return tf.broadcast_to(self.loc, tf.concat([outer, tf.shape(self.loc)], 0))


class MeanSampleProjection(tanh_normal_projection_network.TanhNormalProjectionNetwork):
    """SAC's TanhNormalProjectionNetwork, sampling the mean (see above)."""

    def _output_distribution_spec(self, sample_spec: Any, network_name: str) -> Any:
        spec = super()._output_distribution_spec(sample_spec, network_name)

        def build(*args: Any, **kwargs: Any) -> Any:
            distribution = _MeanSampleNormal(*args, **kwargs)
            return distribution_utils.scale_distribution_to_spec(
                distribution, sample_spec
            )

        return distribution_spec.DistributionSpec(
            build, spec.input_params_spec, sample_spec=sample_spec
        )


def _dqn_loss(agent: Any, experience: Any) -> tf.Tensor:
    return agent._loss(
        experience,
        td_errors_loss_fn=agent._td_errors_loss_fn,
        gamma=agent._gamma,
        reward_scale_factor=agent._reward_scale_factor,
        training=True,
    ).loss


def _transition(agent: Any, experience: Any) -> tuple:
    time_steps, policy_steps, next_time_steps = agent._as_transition(experience)
    return time_steps, policy_steps.action, next_time_steps


def _ddpg_critic_loss(agent: Any, experience: Any) -> tf.Tensor:
    time_steps, actions, next_time_steps = _transition(agent, experience)
    return agent.critic_loss(time_steps, actions, next_time_steps, training=True)


def _ddpg_actor_loss(agent: Any, experience: Any) -> tf.Tensor:
    return agent.actor_loss(_transition(agent, experience)[0], training=True)


def _sac_critic_loss(agent: Any, experience: Any) -> tf.Tensor:
    time_steps, actions, next_time_steps = _transition(agent, experience)
    options = dict(
        td_errors_loss_fn=agent._td_errors_loss_fn,
        gamma=agent._gamma,
        reward_scale_factor=agent._reward_scale_factor,
        training=True,
    )
    if isinstance(agent, cql_sac_agent.CqlSacAgent):
        loss = agent._critic_loss_with_optional_entropy_term(
            time_steps, actions, next_time_steps, **options
        )
        cql = agent._cql_loss(time_steps, actions, training=True)
        return loss * agent._critic_loss_weight + cql * agent._get_cql_alpha()
    loss = agent.critic_loss(time_steps, actions, next_time_steps, **options)
    return agent._critic_loss_weight * loss


def _sac_actor_loss(agent: Any, experience: Any) -> tf.Tensor:
    time_steps, actions, _ = _transition(agent, experience)
    if isinstance(agent, cql_sac_agent.CqlSacAgent):
        # Its AutoGraph tf.function's Python code, run as it is called: the
        # same loss, without another trace (about 2 s).
        actor_loss = cql_sac_agent.CqlSacAgent.actor_loss.python_function
        return agent._actor_loss_weight * actor_loss(agent, time_steps, actions=actions)
    return agent._actor_loss_weight * agent.actor_loss(time_steps, training=True)


def _sac_alpha_loss(agent: Any, experience: Any) -> tf.Tensor:
    time_steps = _transition(agent, experience)[0]
    if isinstance(agent, cql_sac_agent.CqlSacAgent):
        return agent._alpha_loss_weight * agent.alpha_loss(time_steps)
    return agent._alpha_loss_weight * agent.alpha_loss(time_steps, training=True)


def _ppo_loss(agent: Any, experience: Any) -> tf.Tensor:
    """The loss of PPO's first epoch, as `PPOAgent._train` computes it."""
    processed = agent._preprocess(agent._as_trajectory(experience))
    old_parameters = processed.policy_info["dist_params"]
    old_distribution = ppo_utils.distribution_from_spec(
        agent._action_distribution_spec,
        old_parameters,
        legacy_distribution_network=isinstance(
            agent._actor_net, network.DistributionNetwork
        ),
    )
    old_log_probs = common.log_probability(
        old_distribution, processed.action, agent._action_spec
    )
    time_steps = ts.TimeStep(
        processed.step_type, processed.reward, processed.discount, processed.observation
    )
    advantages = ppo_agent._normalize_advantages(
        processed.policy_info["advantage"], variance_epsilon=1e-8
    )
    return agent.get_loss(
        time_steps,
        processed.action,
        old_log_probs,
        processed.policy_info["return"],
        advantages,
        old_parameters,
        ppo_utils.make_trajectory_mask(processed),
        agent.train_step_counter,
        False,
        old_value_predictions=processed.policy_info["value_prediction"],
        training=True,
    ).loss


def _reinforce_loss(agent: Any, experience: Any) -> tf.Tensor:
    """REINFORCE's loss, as `ReinforceAgent._train` computes it."""
    experience = agent._as_trajectory(experience)
    not_last = tf.cast(
        tf.math.not_equal(experience.next_step_type, ts.StepType.LAST), tf.float32
    )
    discounts = not_last * experience.discount * agent._gamma
    returns = value_ops.discounted_return(
        experience.reward, discounts, time_major=False
    )
    return agent.total_loss(
        experience, tf.stop_gradient(returns), weights=None, training=True
    ).loss


def _bc_loss(agent: Any, experience: Any) -> tf.Tensor:
    return agent._loss(experience, training=True).loss


def _q_network(deterministic: bool) -> dict:
    return {"q_network": q_network.QNetwork(OBS, ACTIONS, fc_layer_params=(8,))}


def _categorical_network(deterministic: bool) -> dict:
    network_ = categorical_q_network.CategoricalQNetwork(
        OBS, ACTIONS, num_atoms=11, fc_layer_params=(8,)
    )
    return {"categorical_q_network": network_}


def _critic() -> Any:
    return critic_network.CriticNetwork((OBS, CONTINUOUS), joint_fc_layer_params=(8,))


def _ddpg_networks(deterministic: bool) -> dict:
    actor = actor_network.ActorNetwork(OBS, CONTINUOUS, fc_layer_params=(8,))
    return {"actor_network": actor, "critic_network": _critic()}


def _td3_networks(deterministic: bool) -> dict:
    noise = {"target_policy_noise": 0.0} if deterministic else {}
    return {**_ddpg_networks(deterministic), "actor_update_period": 1, **noise}


def _sac_networks(deterministic: bool) -> dict:
    projection = (
        MeanSampleProjection
        if deterministic
        else tanh_normal_projection_network.TanhNormalProjectionNetwork
    )
    actor = actor_distribution_network.ActorDistributionNetwork(
        OBS, CONTINUOUS, fc_layer_params=(8,), continuous_projection_net=projection
    )
    return {"actor_network": actor, "critic_network": _critic()}


def _cql_networks(deterministic: bool) -> dict:
    # CqlSacAgent.actor_loss is a tf.function: its random draws are fixed when
    # each agent traces it, so a restored agent could not repeat them; the
    # actor samples its mean. Deterministic: the CQL term (which samples
    # uniform actions) weighs 0 too.
    return {
        **_sac_networks(True),
        "cql_alpha": 0.0 if deterministic else 0.5,
        "num_cql_samples": 2,
        "include_critic_entropy_term": False,
        "use_lagrange_cql_alpha": False,
    }


def _actor_distribution() -> Any:
    return actor_distribution_network.ActorDistributionNetwork(
        OBS, CONTINUOUS, fc_layer_params=(8,)
    )


def _ppo_networks(deterministic: bool) -> dict:
    return {
        "actor_net": _actor_distribution(),
        "value_net": value_network.ValueNetwork(OBS, fc_layer_params=(8,)),
        "num_epochs": 1,
        "normalize_observations": False,
        "normalize_rewards": False,
    }


def _ppo_kl_networks(deterministic: bool) -> dict:
    return {
        **_ppo_networks(deterministic),
        "initial_adaptive_kl_beta": 1.0,
        "adaptive_kl_target": 0.01,
        "adaptive_kl_tolerance": 0.3,
        # tf-agents 0.19's default (None) fails in its own kl_cutoff_loss.
        "kl_cutoff_factor": 2.0,
        "kl_cutoff_coef": 100.0,
    }


def _reinforce_networks(deterministic: bool) -> dict:
    return {"actor_network": _actor_distribution()}


def _bc_networks(deterministic: bool) -> dict:
    network_ = q_network.QNetwork(OBS, ACTIONS, fc_layer_params=(8,))
    return {"cloning_network": network_, "num_outer_dims": 2}


@dataclasses.dataclass(frozen=True)
class AgentCase:
    """One agent of the matrix.

    Attributes:
        agent_class: The tf-agents agent class.
        actions: Its action spec.
        networks: `deterministic -> constructor arguments` (networks and
            options); deterministic: every loss free of random draws.
        losses: `(optimizer argument, loss(agent, experience))` in the
            order the train step applies them.
        steps: The time steps of a training batch.
        gradient_summaries: Whether `summarize_grads_and_vars` writes
            tf-agents' own `<variable>_gradient_norm` scalars (not
            BehavioralCloningAgent: only its variables).
    """

    agent_class: type
    actions: Any
    networks: Callable[[bool], dict]
    losses: tuple[tuple[str, Callable[[Any, Any], tf.Tensor]], ...]
    steps: int = 2
    gradient_summaries: bool = True

    @property
    def name(self) -> str:
        return self.agent_class.__name__


_DDPG_LOSSES = (
    ("critic_optimizer", _ddpg_critic_loss),
    ("actor_optimizer", _ddpg_actor_loss),
)
_SAC_LOSSES = (
    ("critic_optimizer", _sac_critic_loss),
    ("actor_optimizer", _sac_actor_loss),
    ("alpha_optimizer", _sac_alpha_loss),
)

AGENT_CASES = {
    case.name: case
    for case in (
        AgentCase(dqn_agent.DqnAgent, ACTIONS, _q_network, (("optimizer", _dqn_loss),)),
        AgentCase(
            dqn_agent.DdqnAgent, ACTIONS, _q_network, (("optimizer", _dqn_loss),)
        ),
        AgentCase(
            categorical_dqn_agent.CategoricalDqnAgent,
            ACTIONS,
            _categorical_network,
            (("optimizer", _dqn_loss),),
        ),
        AgentCase(ddpg_agent.DdpgAgent, CONTINUOUS, _ddpg_networks, _DDPG_LOSSES),
        AgentCase(td3_agent.Td3Agent, CONTINUOUS, _td3_networks, _DDPG_LOSSES),
        AgentCase(sac_agent.SacAgent, CONTINUOUS, _sac_networks, _SAC_LOSSES),
        AgentCase(
            ppo_clip_agent.PPOClipAgent,
            CONTINUOUS,
            _ppo_networks,
            (("optimizer", _ppo_loss),),
            steps=3,
        ),
        AgentCase(
            ppo_kl_penalty_agent.PPOKLPenaltyAgent,
            CONTINUOUS,
            _ppo_kl_networks,
            (("optimizer", _ppo_loss),),
            steps=3,
        ),
        AgentCase(
            reinforce_agent.ReinforceAgent,
            CONTINUOUS,
            _reinforce_networks,
            (("optimizer", _reinforce_loss),),
            steps=3,
        ),
        AgentCase(
            behavioral_cloning_agent.BehavioralCloningAgent,
            ACTIONS,
            _bc_networks,
            (("optimizer", _bc_loss),),
            gradient_summaries=False,
        ),
        AgentCase(cql_sac_agent.CqlSacAgent, CONTINUOUS, _cql_networks, _SAC_LOSSES),
    )
}


def build_case_agent(
    case: AgentCase,
    kind: str,
    monitor: dict | None = None,
    deterministic: bool = False,
    seed: int = 0,
    **options: Any,
) -> Any:
    """`case`'s agent with fresh `kind` optimizers, its networks initialized
    from `seed`; monitored through `monitored(...)` with the `monitor`
    options when they are given. `options` go to the constructor (e.g.
    tf-agents' `debug_summaries`)."""
    tf.keras.utils.set_random_seed(seed)  # tf_keras initializers' seeds too
    agent_class = case.agent_class
    if monitor is not None:
        agent_class = tf_agents_integration.monitored(agent_class, **monitor)
    optimizers = {name: OPTIMIZER_KINDS[kind]() for name, _ in case.losses}
    agent = agent_class(
        ts.time_step_spec(OBS),
        case.actions,
        **case.networks(deterministic),
        **optimizers,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
        **options,
    )
    agent.initialize()
    return agent


def case_batch(case: AgentCase, agent: Any, seed: int) -> Any:
    """A `[BATCH, case.steps]` batch of `agent`'s collect data spec: random
    observations, actions and rewards; mid-episode steps (REINFORCE: each
    row one whole episode); PPO's recorded action distributions unit-scale
    normals around random means."""
    rng = np.random.default_rng(seed)
    outer = (BATCH, case.steps)
    experience = tensor_spec.sample_spec_nest(
        agent.collect_data_spec, seed=seed, outer_dims=outer
    )
    step_type = np.full(outer, ts.StepType.MID, np.int32)
    next_step_type = step_type.copy()
    if case.agent_class is reinforce_agent.ReinforceAgent:
        step_type[:, 0] = ts.StepType.FIRST
        next_step_type[:, -1] = ts.StepType.LAST
    policy_info = experience.policy_info
    if isinstance(policy_info, dict) and "dist_params" in policy_info:
        loc = rng.uniform(-0.5, 0.5, (*outer, *CONTINUOUS.shape.as_list()))
        policy_info = {
            **policy_info,
            "dist_params": {
                "loc": tf.constant(loc, tf.float32),
                "scale": tf.ones_like(loc, tf.float32),
            },
        }
    return experience._replace(
        step_type=tf.constant(step_type),
        next_step_type=tf.constant(next_step_type),
        observation=tf.constant(rng.normal(size=(*outer, 6)), tf.float32),
        reward=tf.constant(rng.normal(size=outer), tf.float32),
        discount=tf.ones(outer),
        policy_info=policy_info,
    )


def construct(case: Any, optimizers: dict, counter: tf.Variable) -> Any:
    """`case`'s agent (an `AgentCase`), built with the given `optimizers` as
    they are, and initialized."""
    tf.keras.utils.set_random_seed(0)
    agent = case.agent_class(
        ts.time_step_spec(OBS),
        case.actions,
        **case.networks(False),
        **optimizers,
        train_step_counter=counter,
    )
    agent.initialize()
    return agent
