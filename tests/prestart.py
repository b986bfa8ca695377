"""Processes a test module waits for, started when the session starts.

The test process keeps about one of the machine's two cores busy. A module
whose fixture waits for processes of its own (the distributed runners, the
replicas' noise scale) registers their starter here when it is imported;
`tests/conftest.py` hands over the collected modules, and a thread starts
their starters one after the other, in the order of the modules, each when
the one before has ended: one of them runs at a time, beside the tests
before its module. The module's fixture takes them (`take`): started, or
started then if their turn has not come (or for a single test run alone).

Example (a module's own):

    def _start(folder):
        return process.start("tests.distribute.runner", "mirrored", folder)

    prestart.register(__name__, _start)

    @pytest.fixture(scope="module")
    def runs():
        runner, folder = prestart.take(__name__, _start)
        process.finish([runner], timeout=300)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable
from typing import Any

#: A starter starts processes that write in `folder` and returns what the
#: fixture waits for: a `subprocess.Popen`, an object with a `process`
#: attribute, or a list or dict of those.
Starter = Callable[[str], Any]

_STARTERS: dict[str, Starter] = {}
_lock = threading.Lock()
_queue: list[str] = []
_started: dict[str, tuple[Any, str]] = {}
_folders: list[str] = []
_stopping = threading.Event()


def register(module: str, starter: Starter) -> None:
    """`starter` is to be started for `module` (its `__name__`)."""
    _STARTERS[module] = starter


def _run(starter: Starter) -> tuple[Any, str]:
    folder = tempfile.mkdtemp(prefix="keras_gradmon_prestart_")
    _folders.append(folder)
    return starter(folder), folder


def _processes(started: Any) -> list[subprocess.Popen]:
    if isinstance(started, subprocess.Popen):
        return [started]
    if isinstance(started, dict):
        started = list(started.values())
    if isinstance(started, (list, tuple)):
        return [p for item in started for p in _processes(item)]
    process = getattr(started, "process", None)
    return [process] if isinstance(process, subprocess.Popen) else []


def _start_in_turn() -> None:
    while not _stopping.is_set():
        with _lock:
            if not _queue:
                return
            module = _queue.pop(0)
            _started[module] = _run(_STARTERS[module])
            processes = _processes(_started[module][0])
        for process in processes:
            while process.poll() is None and not _stopping.wait(0.2):
                pass


def start(modules: Iterable[str]) -> None:
    """Starts, one after the other in a thread, the registered starters of
    `modules` (in their order, each once)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # under pytest-xdist both cores run tests: start on demand
    wanted = [m for m in dict.fromkeys(modules) if m in _STARTERS]
    with _lock:
        _queue.extend(m for m in wanted if m not in _queue and m not in _started)
    if wanted:
        threading.Thread(target=_start_in_turn, daemon=True).start()


def take(module: str, starter: Starter) -> tuple[Any, str]:
    """`(what the starter returned, its folder)`: started with the session,
    or now."""
    with _lock:
        if module in _started:
            return _started.pop(module)
        if module in _queue:
            _queue.remove(module)
        return _run(starter)


def stop() -> None:
    """Kills what was started and not taken (a session stopped early), and
    removes the folders."""
    _stopping.set()
    with _lock:
        _queue.clear()
        for started, _ in _started.values():
            for process in _processes(started):
                if process.poll() is None:
                    process.kill()
                    process.wait()
        _started.clear()
        for folder in _folders:
            shutil.rmtree(folder, ignore_errors=True)
        _folders.clear()
