"""The compatibility matrix: every tf-agents agent that takes an optimizer
with the optimizer kinds (`tf.compat.v1.train.AdamOptimizer`, tf_keras's
new-style `tf.keras.optimizers.Adam`, tf_keras's classic
`tf.keras.optimizers.legacy.Adam`), wrapped through `monitored(...)`: every
agent with at least one kind, every kind with the agents whose use of the
optimizer differs by kind (`CELLS`).

Each cell is checked twice:
- eagerly, with tf-agents' own `debug_summaries` and
  `summarize_grads_and_vars` on under a writer: weights and optimizer state
  bit-identical to the unwrapped agent; the monitor's per-variable norms
  equal tf-agents' own `<variable>_gradient_norm` summaries; a checkpoint
  round trip (optimizer slots and monitor state restored on the first step);
- in `common.function(agent.train)` under a writer with global-norm
  clipping: the in-graph summaries equal gradients recomputed apart from
  training (GradientTape on the agent's own losses), `clip/post_norm` is the
  max norm, and the inner optimizer got the clipped gradients; Td3Agent x
  tf_keras with tf-agents' debug flags on too, in the same traced step: the
  monitor's per-variable norms equal tf-agents' own (unclipped) ones.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tf_agents.trajectories import time_step as ts
from tf_agents.utils import common

import keras_gradmon
from keras_gradmon.integrations import tf_agents as tf_agents_integration
from keras_gradmon.wrapping import MonitoredOptimizer
from tests.agents.helpers import (
    AGENT_CASES,
    OBS,
    OPTIMIZER_ATTRIBUTES,
    OPTIMIZER_KINDS,
    AgentCase,
    build_case_agent,
    case_batch,
    construct,
)
from tests.reference import load_events, scalar_series

FLAGS = {"debug_summaries": True, "summarize_grads_and_vars": True}
MAX_NORM = 1e-4
#: The tag scope `monitored` gives each optimizer of a several-optimizer agent.
SCOPES = {
    "actor_optimizer": "actor",
    "critic_optimizer": "critic",
    "alpha_optimizer": "alpha",
}
#: A monitor that records little (cheap to trace), every step, and clips.
LEAN_CLIPPED = {
    "every_n_steps": 1,
    "statistics": ("norm",),
    "weight_statistics": False,
    "histogram_every_n_steps": None,
    "clipping": {"method": "global_norm", "max_norm": MAX_NORM},
}
#: The first tag segments the lean monitor of the in-graph test writes.
MONITOR_STATISTICS = ("grad_norm", "grad_nonfinite", "grad_missing", "clip")
#: The cells of the matrix: every agent with at least one kind, and every kind
#: with several-optimizer agents. The wrapper's code is per optimizer kind
#: (tf.compat.v1.train, tf_keras new-style, tf_keras legacy), not per agent;
#: what an agent adds is how it calls its optimizers. Each kind runs where
#: the agent's use of the optimizer differs by kind:
#: - SacAgent: three optimizers, each scoped; tf_keras's new-style optimizer
#:   is converted to legacy inside the wrapper (`convert_like_sac`).
#: - Td3Agent: two optimizers, the actor's applied inside a `tf.cond`.
#: - PPOClipAgent: reads the learning rate through the wrapper
#:   (`ppo_utils.get_learning_rate`: `learning_rate`, or v1's `_lr`) and
#:   checks `isinstance(optimizer, tf.keras.optimizers.Optimizer)`.
#: The other agents call `optimizer.apply_gradients` on one optimizer (or,
#: DDPG, two, as TD3 without the cond), each with one kind, the kinds spread
#: among them. CqlSacAgent (SAC's optimizers, its own train step and CQL
#: loss) with tf_keras: the conversion, as in SacAgent.
EVERY_KIND = ("SacAgent", "Td3Agent", "PPOClipAgent")
ONE_KIND = {
    "DqnAgent": "v1",
    "DdqnAgent": "tf_keras",
    "CategoricalDqnAgent": "tf_keras_legacy",
    "DdpgAgent": "tf_keras_legacy",
    "PPOKLPenaltyAgent": "v1",
    "ReinforceAgent": "tf_keras_legacy",
    "BehavioralCloningAgent": "tf_keras",
    "CqlSacAgent": "tf_keras",
}
assert set(EVERY_KIND) | set(ONE_KIND) == set(AGENT_CASES)
assert set(ONE_KIND.values()) == set(OPTIMIZER_KINDS)
#: `FULL_MATRIX=1` in the environment runs every pair (33 cells, about four
#: more minutes of CPU), as before a release.
FULL = os.environ.get("FULL_MATRIX") == "1"
CELLS = [
    pytest.param(name, kind, id=f"{name}-{kind}")
    for name in AGENT_CASES
    for kind in OPTIMIZER_KINDS
    if FULL or name in EVERY_KIND or ONE_KIND[name] == kind
]

#: The checkpoint round trip is skipped (unless FULL) for CqlSacAgent: it
#: inherits SacAgent's optimizer attributes (the checkpoint's names), and its
#: wrappers restore their slots and monitor state on their first
#: `apply_gradients` as SacAgent's do (cell SacAgent-tf_keras); each of its
#: agents traces its AutoGraph `actor_loss` again (about 4 s).
ROUND_TRIP_AS = {"CqlSacAgent": "SacAgent"}

# Every writer of this module stays referenced (and open: CqlSacAgent's
# internal tf.functions keep writing to the writer they were traced under)
# until the process ends. keras_gradmon's writer claims are keyed by
# `id(writer)` while the monitors of earlier agents may still be alive
# (reference cycles): a new writer that got a freed one's id would be taken
# for it, and refused (reported to the lead).
_WRITERS: list = []


def _writer(path: Any) -> Any:
    writer = tf.summary.create_file_writer(str(path))
    _WRITERS.append(writer)
    return writer


def _scope(case: AgentCase, argument: str) -> str | None:
    return SCOPES[argument] if len(case.losses) > 1 else None


def _tag(statistic: str, subject: str, scope: str | None) -> str:
    return f"{statistic}/{scope}/{subject}" if scope else f"{statistic}/{subject}"


def _inner(optimizer: Any) -> Any:
    if isinstance(optimizer, MonitoredOptimizer):
        return optimizer.inner_optimizer
    return optimizer


def _optimizer(agent: Any, argument: str) -> Any:
    return getattr(agent, OPTIMIZER_ATTRIBUTES[argument])


def _slots(optimizer: Any, variable: tf.Variable) -> dict[str, np.ndarray]:
    """The state an Adam optimizer keeps for `variable`."""
    if isinstance(optimizer, tf_keras.optimizers.Optimizer):  # new-style
        index = optimizer._index_dict[optimizer._var_key(variable)]
        return {
            "m": optimizer._momentums[index].numpy(),
            "v": optimizer._velocities[index].numpy(),
        }
    names = optimizer.get_slot_names()
    assert names
    return {name: optimizer.get_slot(variable, name).numpy() for name in names}


def _shared_state(optimizer: Any, slots: set) -> list[np.ndarray]:
    """The state not kept per variable: Adam's beta powers (v1), the
    iteration count (tf_keras)."""
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        rest = [v for v in optimizer.variables() if v.ref() not in slots]
        return [v.numpy() for v in sorted(rest, key=lambda v: v.name)]
    return [optimizer.iterations.numpy()]


def _slot_refs(optimizer: Any, variables: list) -> set:
    if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
        return set()
    names = optimizer.get_slot_names()
    return {optimizer.get_slot(v, n).ref() for v in variables for n in names}


def assert_same_records(
    expected: MonitoredOptimizer, actual: MonitoredOptimizer, counterpart: dict
) -> None:
    """`actual`'s monitor holds `expected`'s latest record, each variable's
    statistics in the row of its counterpart (`{actual ref: expected var}`)."""
    want, got = expected.snapshot(), actual.snapshot()
    assert got.step == want.step
    np.testing.assert_equal(got.totals, want.totals)
    rows = {v.ref(): i for i, v in enumerate(expected.monitor.variables)}
    for i, variable in enumerate(actual.monitor.variables):
        row = rows[counterpart[variable.ref()].ref()]
        np.testing.assert_array_equal(got.grad[i], want.grad[row], variable.name)
    a, b = actual.monitor.state.step_counts, expected.monitor.state.step_counts
    np.testing.assert_array_equal(a.numpy(), b.numpy(), "step_counts")


def assert_same_state(
    case: AgentCase, expected: Any, actual: Any, monitors: bool = False
) -> None:
    """`actual` (monitored) holds exactly `expected`'s variables and optimizer
    state (and, with `monitors`, monitor state)."""
    mine, theirs = list(actual.variables), list(expected.variables)
    assert [v.shape for v in mine] == [v.shape for v in theirs]
    for want, got in zip(theirs, mine):
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=got.name)
    counterpart = {v.ref(): w for v, w in zip(mine, theirs)}
    for argument, _ in case.losses:
        wrapper = _optimizer(actual, argument)
        assert wrapper is getattr(actual, f"{argument}_monitor")
        variables = wrapper.monitor.variables
        others = [counterpart[v.ref()] for v in variables]
        got, want = _inner(wrapper), _inner(_optimizer(expected, argument))
        for variable, other in zip(variables, others):
            a, b = _slots(got, variable), _slots(want, other)
            assert a.keys() == b.keys()
            for name in a:
                np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        mine_shared = _shared_state(got, _slot_refs(got, variables))
        theirs_shared = _shared_state(want, _slot_refs(want, others))
        np.testing.assert_equal(mine_shared, theirs_shared)
        if monitors:
            other = getattr(expected, f"{argument}_monitor")
            assert_same_records(other, wrapper, counterpart)


def _train(agent: Any, batches: list, writer: Any = None, seed: int = 1) -> None:
    tf.keras.utils.set_random_seed(seed)  # the same draws for every agent
    with writer.as_default() if writer is not None else contextlib.nullcontext():
        for batch in batches:
            agent.train(batch)


def _tf_agents_gradient_norm(events: Any, variable: tf.Variable, step: int) -> float:
    """tf-agents' own `<variable>_gradient_norm` summary (summarize_grads)."""
    suffix = "summarize_grads/" + variable.name.replace(":", "_") + "_gradient_norm"
    tags = [
        t for t in events.Tags()["tensors"] if t == suffix or t.endswith("/" + suffix)
    ]
    assert len(tags) == 1, (suffix, tags)
    return scalar_series(events, tags[0])[step]


@pytest.mark.parametrize("name, kind", CELLS)
def test_matches_unwrapped_and_round_trips(name, kind, tmp_path):
    case = AGENT_CASES[name]
    monitor = {"every_n_steps": 3}
    plain = build_case_agent(case, kind, **FLAGS)
    agent = build_case_agent(case, kind, monitor=monitor, **FLAGS)
    batches = [case_batch(case, plain, seed) for seed in range(3)]
    _train(plain, batches[:2])
    writer = _writer(tmp_path / "logs")
    _train(agent, batches[:2], writer)
    assert_same_state(case, plain, agent)

    # tf-agents' own summaries and the monitor's, side by side at step 0.
    writer.flush()
    events = load_events(str(tmp_path / "logs"))
    for argument, _ in case.losses:
        wrapper, scope = getattr(agent, f"{argument}_monitor"), _scope(case, argument)
        norms = scalar_series(events, _tag("grad_norm", "global", scope))
        assert sorted(norms) == [0] and np.isfinite(norms[0]) and norms[0] > 0
        for variable, path in zip(wrapper.monitor.variables, wrapper.monitor.paths):
            ours = scalar_series(events, _tag("grad_norm", path, scope))[0]
            assert np.isfinite(ours)
            if case.gradient_summaries:
                theirs = _tf_agents_gradient_norm(events, variable, 0)
                assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-30)

    if name in ROUND_TRIP_AS and not FULL:
        return  # the round trip of ROUND_TRIP_AS[name], run by its own cell
    # Save after 2 steps; restore into an agent built from other weights; one
    # more step each: the same weights, optimizer state and monitor state.
    path = tf.train.Checkpoint(agent=agent).save(str(tmp_path / "ckpt"))
    restored = build_case_agent(case, kind, monitor=monitor, seed=7, **FLAGS)
    status = tf.train.Checkpoint(agent=restored).restore(path)
    status.assert_existing_objects_matched()
    _train(agent, batches[2:], seed=2)
    _train(restored, batches[2:], seed=2)
    status.assert_consumed()  # slots and monitor state too, made on the step
    assert_same_state(case, agent, restored, monitors=True)
    for argument, _ in case.losses:
        snapshot = getattr(restored, f"{argument}_monitor").snapshot()
        assert snapshot.step == 0  # restored: step 2 was not due


def recompute_gradients(
    case: AgentCase, agent: Any, batch: Any, before: list, after: list
) -> dict[str, list[np.ndarray]]:
    """The gradients of each optimizer at a train step, recomputed apart from
    it with a GradientTape on the agent's own losses: each loss on the
    weights it saw (`before` the step, but `after` for the networks that the
    step updated before it, as SAC's actor loss sees the updated critics).

    Args:
        before, after: The values of `agent.variables` around the step.

    Returns:
        `{optimizer argument: gradients}`, in the wrapper's variable order.
    """
    variables = list(agent.variables)
    updated: list = []
    grads = {}
    for argument, loss in case.losses:
        for variable, value in zip(variables, before):
            variable.assign(value)
        for variable, value in zip(variables, after):
            if any(variable is other for other in updated):
                variable.assign(value)
        trainable = getattr(agent, f"{argument}_monitor").monitor.variables
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(trainable)
            value = loss(agent, batch)
        grads[argument] = [g.numpy() for g in tape.gradient(value, trainable)]
        updated += trainable
    for variable, value in zip(variables, after):
        variable.assign(value)
    return grads


def _global_norm(grads: list[np.ndarray]) -> float:
    return float(np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads)))


#: The cell that also runs tf-agents' own debug flags in the traced step
#: (TD3 applies its actor's gradients inside a tf.cond; tf-agents' summaries
#: do not depend on the kind).
IN_GRAPH_FLAGS = ("Td3Agent", "tf_keras")


@pytest.mark.parametrize("name, kind", CELLS)
def test_in_graph_summaries_hold_the_recomputed_gradients(name, kind, tmp_path):
    case = AGENT_CASES[name]
    flags = FLAGS if (name, kind) == IN_GRAPH_FLAGS else {}
    agent = build_case_agent(
        case, kind, monitor=LEAN_CLIPPED, deterministic=True, **flags
    )
    wrappers = {a: getattr(agent, f"{a}_monitor") for a, _ in case.losses}
    train = common.function(agent.train)
    writer = _writer(tmp_path)
    expected, first_moments = [], {}
    for step in range(2):
        batch = case_batch(case, agent, step)
        before = [v.numpy() for v in agent.variables]
        with writer.as_default():
            train(batch)
        after = [v.numpy() for v in agent.variables]
        expected.append(recompute_gradients(case, agent, batch, before, after))
        if step == 0:  # Adam's first moment after one step: 0.1 * gradient
            first_moments = {
                a: [_slots(_inner(w), v)["m"] for v in w.monitor.variables]
                for a, w in wrappers.items()
            }
    writer.flush()
    events = load_events(str(tmp_path))
    for argument, wrapper in wrappers.items():
        scope = _scope(case, argument)
        for step, grads in enumerate(expected):
            want = _global_norm(grads[argument])
            assert want > 10 * MAX_NORM  # so that clipping acts
            for statistic, subject in (("grad_norm", "global"), ("clip", "pre_norm")):
                got = scalar_series(events, _tag(statistic, subject, scope))[step]
                assert got == pytest.approx(want, rel=1e-5), (statistic, step)
            post = scalar_series(events, _tag("clip", "post_norm", scope))[step]
            assert post == pytest.approx(MAX_NORM, rel=1e-5)
            variables = wrapper.monitor.variables
            for variable, path, grad in zip(
                variables, wrapper.monitor.paths, grads[argument]
            ):
                got = scalar_series(events, _tag("grad_norm", path, scope))[step]
                assert got == pytest.approx(np.linalg.norm(grad), rel=1e-5, abs=1e-12)
                if flags:  # tf-agents' own (unclipped) gradient norm too
                    theirs = _tf_agents_gradient_norm(events, variable, step)
                    assert got == pytest.approx(theirs, rel=1e-6)
        # The inner optimizer was given the clipped gradients.
        clipped, _ = tf.clip_by_global_norm(expected[0][argument], MAX_NORM)
        for moment, grad in zip(first_moments[argument], clipped):
            scale = float(np.max(np.abs(grad))) + 1e-30
            np.testing.assert_allclose(moment, 0.1 * grad, rtol=1e-4, atol=1e-6 * scale)
    assert all(np.all(np.isfinite(v.numpy())) for v in agent.variables)
    if len(wrappers) > 1:  # every monitor tag in one scope, chosen by `monitored`
        tags = events.Tags()["tensors"]
        ours = [t.split("/") for t in tags if t.split("/")[0] in MONITOR_STATISTICS]
        assert {parts[1] for parts in ours} == {SCOPES[a] for a in wrappers}


#: Every kind with SacAgent's three optimizers; DDPG's and TD3's two with one
#: kind each (naming the scopes does not depend on the kind).
REFUSAL = [
    pytest.param(name, kind, id=f"{name}-{kind}")
    for name, kinds in (
        ("DdpgAgent", ["v1"]),
        ("Td3Agent", ["tf_keras"]),
        ("SacAgent", list(OPTIMIZER_KINDS)),
    )
    for kind in kinds
]


@pytest.mark.parametrize("name, kind", REFUSAL)
def test_unnamed_wrappers_on_one_writer_get_distinct_scopes(name, kind, tmp_path):
    case = AGENT_CASES[name]
    counter = tf.Variable(0, dtype=tf.int64)
    optimizers = {  # the user's own wrappers, without names
        argument: keras_gradmon.wrap(OPTIMIZER_KINDS[kind](), step=counter)
        for argument, _ in case.losses
    }
    agent = construct(case, optimizers, counter)
    writer = _writer(tmp_path)
    with writer.as_default():
        agent.train(case_batch(case, agent, 0))
    writer.flush()
    scopes = [wrapper.monitor.tags.scope for wrapper in optimizers.values()]
    # The first one keeps unscoped tags; the others are named after what
    # they train.
    assert scopes.count(None) == 1 and len(set(scopes)) == len(scopes)
    events = load_events(str(tmp_path))
    for scope in scopes:
        norms = scalar_series(events, _tag("grad_norm", "global", scope))
        assert sorted(norms) == [0] and np.isfinite(norms[0])


@pytest.mark.parametrize("kind", list(OPTIMIZER_KINDS))
def test_named_wrappers_write_under_their_names(kind, tmp_path):
    # The user's own names (not `monitored`): each is the wrapper's tag scope.
    case = AGENT_CASES["SacAgent"]
    counter = tf.Variable(0, dtype=tf.int64)
    scopes = {
        "actor_optimizer": ("Actor", "Actor"),
        "critic_optimizer": ("critic/q", "critic_q"),
        "alpha_optimizer": ("alpha", "alpha"),
    }
    optimizers = {
        argument: keras_gradmon.wrap(
            OPTIMIZER_KINDS[kind](), name=name, step=counter, every_n_steps=1
        )
        for argument, (name, _) in scopes.items()
    }
    agent = construct(case, optimizers, counter)
    writer = _writer(tmp_path)
    _train(agent, [case_batch(case, agent, 0)], writer)
    writer.flush()
    events = load_events(str(tmp_path))
    for argument, (_, scope) in scopes.items():
        norms = scalar_series(events, f"grad_norm/{scope}/global")
        assert list(norms) == [0] and norms[0] > 0
        recorded = optimizers[argument].snapshot().totals["grad_norm"]
        assert norms[0] == np.float32(recorded)
    assert "grad_norm/global" not in events.Tags()["tensors"]


def test_monitored_refuses_a_monitored_optimizer():
    case = AGENT_CASES["SacAgent"]
    optimizers = {argument: OPTIMIZER_KINDS["v1"]() for argument, _ in case.losses}
    optimizers["actor_optimizer"] = keras_gradmon.wrap(optimizers["actor_optimizer"])
    agent_class = tf_agents_integration.monitored(case.agent_class)
    with pytest.raises(ValueError, match="`actor_optimizer` is already monitored"):
        agent_class(
            ts.time_step_spec(OBS), case.actions, **case.networks(True), **optimizers
        )
