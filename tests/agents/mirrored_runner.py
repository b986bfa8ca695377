"""DqnAgent under MirroredStrategy (two logical CPUs), run in a process of its
own and pickled for `test_distributed.py`:

    TF_USE_LEGACY_KERAS=1 python -m tests.agents.mirrored_runner OUT_DIR

Each run trains a fresh agent 4 steps on `make_batch()`: under the strategy
each replica gets half of its 8 trajectories, `strategy.run(agent.train)`.
"""

from __future__ import annotations

import os
import pickle
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

STEPS = 4
STATS = {"every_n_steps": 1}
CLIP = {
    "every_n_steps": 1,
    "histogram_every_n_steps": 2,
    "clipping": {"method": "global_norm", "max_norm": 1.0},
}


def _two_cpus() -> None:
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2
    )


def run(strategy, options: dict | None, log_dir: str | None = None) -> dict:
    import contextlib

    import tensorflow as tf

    from tests.agents.helpers import BATCH, loss_gradients, make_agent, make_batch

    with strategy.scope() if strategy else contextlib.nullcontext():
        agent, optimizer = make_agent(
            options is not None,
            tf.VariableAggregation.ONLY_FIRST_REPLICA,
            **(options or {}),
        )
    experience = make_batch()
    if strategy is None:
        train = tf.function(agent.train)
        args = experience
    else:
        half = BATCH // strategy.num_replicas_in_sync

        def part(context):
            start = context.replica_id_in_sync_group * half
            return tf.nest.map_structure(lambda t: t[start : start + half], experience)

        args = strategy.experimental_distribute_values_from_function(part)
        train = tf.function(lambda e: strategy.run(agent.train, args=(e,)))
    writer = tf.summary.create_file_writer(log_dir) if log_dir else None
    result = {"snapshots": [], "reference": []}
    for _ in range(STEPS):
        if strategy is None:  # the global batch's gradient, before the step
            result["reference"].append(loss_gradients(agent, experience))
        with writer.as_default() if writer else contextlib.nullcontext():
            train(args)
        if options is not None:
            result["snapshots"].append(optimizer.snapshot())
    if writer:
        writer.flush()
    result["final"] = [v.numpy() for v in agent._q_network.trainable_weights]
    result["steps"] = int(agent.train_step_counter.numpy())
    return result


def main(out_dir: str) -> None:
    _two_cpus()
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    results = {
        "clip": run(strategy, CLIP, log_dir=os.path.join(out_dir, "logs")),
        "clip_single": run(None, CLIP),
        "stats": run(strategy, STATS),
        "plain": run(strategy, None),
    }
    with open(os.path.join(out_dir, "dqn.pkl"), "wb") as f:
        pickle.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1])
