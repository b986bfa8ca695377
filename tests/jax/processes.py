"""Runs Python in a fresh interpreter on a chosen Keras backend, from the
repository root: the TensorFlow side of a parity test, or a check of what a
fresh process imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(args: list[str], backend: str, timeout: int = 300) -> str:
    """`python *args` with `KERAS_BACKEND=backend`; its stdout (a failure
    shows its stderr)."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
