"""A SavedModel of a policy trained with a monitored optimizer loads in a
fresh interpreter after `import keras_gradmon` (and tf_agents, whose
distribution specs the policy's signatures use), and acts the same."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import tensorflow as tf
from tf_agents.policies import policy_saver

from tests.agents.helpers import OBS, make_agent, make_batch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_policy_saved_model_loads_after_import(tmp_path):
    agent, optimizer = make_agent(True, every_n_steps=1)
    agent.train(make_batch())
    assert optimizer.snapshot().step == 0
    path = str(tmp_path / "policy")
    policy_saver.PolicySaver(agent.policy, batch_size=None).save(path)
    observation = np.random.default_rng(0).normal(size=(3, *OBS.shape))
    expected = agent.policy.action(_time_step(observation)).action.numpy()
    code = textwrap.dedent(
        f"""
        import keras_gradmon
        import numpy as np
        import tensorflow as tf
        from tf_agents.trajectories import time_step
        policy = tf.saved_model.load({path!r})
        observation = tf.constant(np.array({observation.tolist()!r}, "float32"))
        step = time_step.restart(observation, observation.shape[0])
        print(policy.action(step).action.numpy().tolist())
        """
    )
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == str(expected.tolist())


def _time_step(observation: np.ndarray):
    from tf_agents.trajectories import time_step as ts

    batch = observation.shape[0]
    return ts.restart(tf.constant(observation, tf.float32), batch)
