"""Starting the distributed runners as processes of their own, bounded in time."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import time

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


def start(module: str, *args: str, **env: str) -> subprocess.Popen:
    """`python -m module args...` from the repository root, output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=environment(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(processes: list[subprocess.Popen], timeout: float) -> None:
    """Waits for every process; on a failure or the timeout, kills them all and
    raises with the end of each one's output."""
    deadline = time.monotonic() + timeout
    outputs = []
    try:
        for process in processes:
            left = max(1.0, deadline - time.monotonic())
            out, _ = process.communicate(timeout=left)
            outputs.append(out)
    except subprocess.TimeoutExpired:
        outputs = None
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    if outputs is None:
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
