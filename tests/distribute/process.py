"""Starting the distributed runners as processes of their own, bounded in time."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
from typing import IO

ROOT = pathlib.Path(__file__).resolve().parents[2]


def environment(**extra: str) -> dict:
    """The test process's environment, quiet, with the repository importable."""
    env = dict(os.environ)
    env.update(
        KERAS_BACKEND="tensorflow",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
        **extra,
    )
    env.pop("TF_CONFIG", None)
    return env


#: Each started process's output file, by process id.
_OUTPUTS: dict[int, IO[str]] = {}


def start(module: str, *args: str, **env: str) -> subprocess.Popen:
    """`python -m module args...` from the repository root, output captured
    in a file (a process started with the session runs long before anyone
    reads it: a pipe would fill)."""
    # Closed by `finish`.
    output = tempfile.TemporaryFile("w+", errors="replace")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=environment(**env),
        stdout=output,
        stderr=subprocess.STDOUT,
    )
    _OUTPUTS[process.pid] = output
    return process


def _output(process: subprocess.Popen) -> str:
    with _OUTPUTS.pop(process.pid) as output:
        output.seek(0)
        return output.read()


def finish(processes: list[subprocess.Popen], timeout: float) -> None:
    """Waits for every process; on a failure or the timeout, kills them all and
    raises with the end of each one's output."""
    deadline = time.monotonic() + timeout
    outputs = []
    timed_out = False
    try:
        for process in processes:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        outputs = [_output(process) for process in processes]
    if timed_out:
        raise AssertionError(f"runner processes took more than {timeout} s")
    failed = [(p, o) for p, o in zip(processes, outputs) if p.returncode != 0]
    if failed:
        report = [f"{p.args} exited {p.returncode}:\n{o[-4000:]}" for p, o in failed]
        raise AssertionError("\n\n".join(report))


def free_ports(count: int) -> list[int]:
    """Ports of 127.0.0.1 free right now (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
