import pytest


@pytest.fixture(scope="session")
def demo_logs(tmp_path_factory):
    """`keras-gradmon demo`, end to end (both runs), once per session."""
    from keras_gradmon.cli import main

    log_dir = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--logdir", str(log_dir), "--quiet"]) == 0
    return log_dir
