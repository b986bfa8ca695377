"""Runs Python in a fresh interpreter on a chosen Keras backend, from the
repository root: the TensorFlow side of a parity test, or a check of what a
fresh process imports."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Running:
    """A started `python`, its output going to files (no pipe fills while
    nobody reads it)."""

    process: subprocess.Popen
    stdout: IO[str]
    stderr: IO[str]

    def finish(self, timeout: int = 300) -> str:
        """Waits for the process (killed after `timeout` s); its stdout (a
        failure shows its stderr)."""
        try:
            self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        with self.stdout, self.stderr:
            self.stdout.seek(0)
            self.stderr.seek(0)
            stdout, stderr = self.stdout.read(), self.stderr.read()
        assert self.process.returncode == 0, stderr[-3000:]
        return stdout


def start_python(args: list[str], backend: str) -> Running:
    """Starts `python *args` with `KERAS_BACKEND=backend`: it runs beside
    this process until `finish` collects it."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    # Closed by `Running.finish`.
    stdout = tempfile.TemporaryFile("w+", errors="replace")  # noqa: SIM115
    stderr = tempfile.TemporaryFile("w+", errors="replace")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=env, stdout=stdout, stderr=stderr
    )
    return Running(process, stdout, stderr)


def run_python(args: list[str], backend: str, timeout: int = 300) -> str:
    """`python *args` with `KERAS_BACKEND=backend`; its stdout (a failure
    shows its stderr)."""
    return start_python(args, backend).finish(timeout)
