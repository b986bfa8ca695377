"""What `keras-gradmon demo` prints for a newcomer: a run stopped by an alert
says so, the TensorBoard command works as printed, and TensorFlow's loading
notices stay out of the way (issue 29, section 3)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import tensorboard

from keras_gradmon.cli import FAILED_CUINIT, TF_NOTICES, tensorflow_errors
from keras_gradmon.demo import tensorboard_command
from tests.reference import load_events, scalar_series

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_demo_says_that_the_unclipped_run_stopped_early(demo_run):
    log_dir, printed = demo_run
    unclipped, clipped = printed.split("--- run 'clipping'")
    (line,) = [x for x in unclipped.splitlines() if x.startswith("training stopped")]
    steps = int(re.search(r"after (\d+) of 280 steps", line).group(1))
    events = load_events(str(log_dir / "no_clipping" / "train"))
    last_summary = max(scalar_series(events, "grad_norm/global"))
    assert last_summary < steps < 280
    assert f"non-finite gradient at step {last_summary}" in line
    assert "stopped" not in clipped


def test_the_printed_tensorboard_command_runs(demo_run):
    log_dir, printed = demo_run
    command = printed.split("View them with:\n")[1].splitlines()[0].strip()
    assert shlex.split(command)[-2:] == ["--logdir", str(log_dir)]
    done = subprocess.run(
        [*shlex.split(command), "--version_tb"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == tensorboard.__version__


def test_tensorboard_command_without_the_environment_on_path(monkeypatch):
    bin_dir = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", bin_dir)
    assert tensorboard_command("logs") == "tensorboard --logdir logs"
    monkeypatch.setenv("PATH", os.pathsep.join(["/nonexistent", "/usr/bin"]))
    program = shlex.split(tensorboard_command("logs"))[0]
    assert os.path.samefile(program, os.path.join(bin_dir, "tensorboard"))


def test_tensorflow_errors_keeps_errors_and_drops_its_notices():
    captured = (
        "WARNING: All log messages before absl::InitializeLog() is called are "
        "written to STDERR\n"
        "I0000 00:00:1795784378.448801   26050 port.cc:153] oneDNN custom "
        "operations are on.\n"
        "I0000 00:00:1795784378.449133   26050 cudart_stub.cc:31] Could not "
        "find cuda drivers on your machine, GPU will not be used.\n"
        "E0000 00:00:1795784381.442651   26050 cuda_platform.cc:52] failed call "
        "to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR "
        "(303)\n"
        "E0000 00:00:1795784381.5   26050 op_kernel.cc:1] a real error\n"
        "/x.py:3: UserWarning: a Python warning\n"
    )
    assert tensorflow_errors(captured) == (
        "E0000 00:00:1795784381.5   26050 op_kernel.cc:1] a real error\n"
        "/x.py:3: UserWarning: a Python warning\n"
    )
    # With a driver, a failed cuInit is a real error: it stays.
    with_driver = "E0000 00:00:1.0 1 cuda_platform.cc:52] failed call to cuInit\n"
    assert tensorflow_errors(with_driver) == with_driver


def test_the_cli_loads_tensorflow_without_its_notices():
    code = (
        "from keras_gradmon.cli import import_tensorflow_quietly\n"
        "import_tensorflow_quietly()\n"
        "import tensorflow as tf\n"
        "print(int(tf.constant(41) + 1))\n"
    )
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("KERAS_BACKEND", None)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "42\n"
    assert not [x for x in done.stderr.splitlines() if TF_NOTICES.match(x)]
    assert FAILED_CUINIT not in done.stderr
