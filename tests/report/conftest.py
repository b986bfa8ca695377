import contextlib
import fcntl
import io
import os

import pytest


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """`keras-gradmon demo`, end to end (both runs), once per test session:
    the log directory and what it printed. The xdist workers share it: the
    first to take the lock runs the demo, the others read what it left."""
    from keras_gradmon.cli import main

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the session's directory, above the workers'
    log_dir, said = shared / "demo", shared / "demo.printed"
    with open(shared / "demo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not said.exists():
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                assert main(["demo", "--logdir", str(log_dir), "--quiet"]) == 0
            said.write_text(printed.getvalue())
    return log_dir, said.read_text()


@pytest.fixture(scope="session")
def demo_logs(demo_run):
    """The log directory of `keras-gradmon demo` (`demo_run`)."""
    return demo_run[0]
