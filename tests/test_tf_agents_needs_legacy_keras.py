"""`keras_gradmon.integrations.tf_agents` says how to fix a missing
`TF_USE_LEGACY_KERAS=1` instead of tensorflow_probability's AttributeError
(issue 29, section 3). In a fresh process: the variable is read when
`tf.keras` is first used."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = """
import os

def attempt(label):
    try:
        import keras_gradmon.integrations.tf_agents
    except ImportError as error:
        print(label, error)
    else:
        print(label, "imported")

attempt("unset:")
os.environ["TF_USE_LEGACY_KERAS"] = "1"  # after tf.keras was used: too late
attempt("late:")
"""


def test_importing_without_legacy_keras_names_the_fix():
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("TF_USE_LEGACY_KERAS", None)
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    unset, late = done.stdout.splitlines()
    for line in (unset, late):
        assert "set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported" in line
        assert "has no attribute '__internal__'" in line  # the symptom, named
        assert line.endswith("tf.keras is keras._tf_keras.keras")
    assert unset.startswith("unset: ")
    assert "Received: TF_USE_LEGACY_KERAS=None, " in unset
    assert "Received: TF_USE_LEGACY_KERAS='1' (set after tf.keras was " in late
