"""A real TensorBoard server in a subprocess, for the tests that talk to it
over HTTP: started on a free port of 127.0.0.1, stopped at the end."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence

import pytest

DEADLINE_S = 90


def serve(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen, int]:
    """`(process, port)` of TensorBoard started by `argv`, once it says
    where it serves ("TensorBoard 2.x at http://127.0.0.1:PORT/")."""
    process = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=None if env is None else dict(env),
    )
    start = time.monotonic()
    for line in process.stdout:
        if "http://127.0.0.1:" in line:
            return process, int(line.split("http://127.0.0.1:")[1].split("/")[0])
        if time.monotonic() - start > DEADLINE_S:
            break
    stop(process)
    pytest.fail("TensorBoard did not say where it serves")


def stop(process: subprocess.Popen) -> None:
    """Ends TensorBoard, killing it if it does not stop within 20 s."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=20)
