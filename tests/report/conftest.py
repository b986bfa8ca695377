import contextlib
import io

import pytest


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """`keras-gradmon demo`, end to end (both runs), once per session: the
    log directory and what it printed."""
    from keras_gradmon.cli import main

    log_dir = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["demo", "--logdir", str(log_dir), "--quiet"]) == 0
    return log_dir, printed.getvalue()


@pytest.fixture(scope="session")
def demo_logs(demo_run):
    """The log directory of `keras-gradmon demo` (`demo_run`)."""
    return demo_run[0]
