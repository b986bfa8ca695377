"""A run backed up by `BackupAndRestore`, killed (SIGKILL) and resumed, with
autoclip (whose state the backup holds with the monitor's): after the
resume no step before the backup is written again, and no step is lost
(issue 29, section 5). Two child processes: the first is killed in the very
batch of a backup, right after it (the writer's thread has then had no
time: the wrapper writes what its state holds before it is saved), the
second resumes from it to the end."""

from __future__ import annotations

import collections
import glob
import os
import signal
import subprocess
import sys
import textwrap

from tensorboard.backend.event_processing import event_file_loader

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SAVE_FREQ = 5  # batches: backups after steps 5, 10, 15, ...
KILL = 10  # killed at the end of the batch that made the count 10
BACKUP = 10  # the last backup before it
TAGS = ("grad_norm/global", "grad_hist/mlp/head/bias")  # histograms every 4

CHILD = textwrap.dedent(
    """
    import os, signal, sys

    import keras

    import keras_gradmon
    from tests.helpers import LOSS, data, mlp

    log_dir, backup_dir = sys.argv[1], sys.argv[2]
    save_freq, kill = int(sys.argv[3]), int(sys.argv[4])


    class Kill(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == kill:
                os.kill(os.getpid(), signal.SIGKILL)


    x, y = data(n=64)
    model = mlp()
    model.compile(
        keras_gradmon.GradientMonitorOptimizer(
            keras.optimizers.SGD(0.05),
            every_n_steps=1,
            histogram_every_n_steps=4,
            clipping={"method": "autoclip"},
        ),
        LOSS,
    )
    model.fit(
        x, y, batch_size=8, epochs=4, shuffle=False, verbose=0,
        callbacks=[
            # The backup first: it saves before the monitor's callback looks.
            keras.callbacks.BackupAndRestore(backup_dir, save_freq=save_freq),
            keras_gradmon.GradientMonitorCallback(log_dir, alerts=False),
            Kill(),
        ],
    )
    print("END", int(model.optimizer.iterations.numpy()))
    """
)


def _run(script, log_dir, backup_dir, kill):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
        "KERAS_BACKEND": "tensorflow",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    process = subprocess.Popen(
        [sys.executable, str(script), log_dir, backup_dir, str(SAVE_FREQ), str(kill)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = process.communicate(timeout=300)
    return process.pid, process.returncode, out, err


def _steps(path: str) -> dict[str, list[int]]:
    """`{tag: steps}` written to one event file, in file order (read raw:
    TensorBoard's accumulator would purge the rolled-back steps)."""
    found = collections.defaultdict(list)
    for event in event_file_loader.EventFileLoader(path).Load():
        for value in event.summary.value:
            if value.tag in TAGS:
                found[value.tag].append(event.step)
    return found


def test_a_killed_and_resumed_run_writes_each_step_once(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    log_dir, backup_dir = str(tmp_path / "logs"), str(tmp_path / "backup")

    killed_pid, code, _, err = _run(script, log_dir, backup_dir, KILL)
    assert code == -signal.SIGKILL, err[-3000:]
    resumed_pid, code, out, err = _run(script, log_dir, backup_dir, -1)
    assert code == 0, err[-3000:]
    end = int(out.split("END")[-1])
    # Keras resumes at the start of the backed-up epoch, from the backup's
    # step: epoch 1's 8 batches from step 10, then epochs 2 and 3.
    assert end == BACKUP + 8 + 16

    files = glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))
    killed, resumed = (
        [f for f in files if f".{pid}." in f] for pid in (killed_pid, resumed_pid)
    )
    assert len(killed) == len(resumed) == 1, files  # one event file each
    killed, resumed = _steps(killed[0]), _steps(resumed[0])

    norms_killed = killed["grad_norm/global"]
    norms_resumed = resumed["grad_norm/global"]
    # Everything up to the backup is on disk from the killed run, none of
    # it again from the resumed one, which starts at the backup's step.
    assert norms_killed[:BACKUP] == list(range(BACKUP))
    assert set(norms_killed) <= set(range(KILL))
    assert norms_resumed == list(range(BACKUP, end))
    counts = collections.Counter(norms_killed + norms_resumed)
    assert set(counts) == set(range(end))  # no step lost
    assert all(counts[step] == 1 for step in range(BACKUP))
    assert all(counts[step] <= 2 for step in range(BACKUP, KILL))  # rolled back
    assert all(counts[step] == 1 for step in range(KILL, end))

    hist_killed = killed["grad_hist/mlp/head/bias"]
    hist_resumed = resumed["grad_hist/mlp/head/bias"]
    assert hist_killed[:3] == [0, 4, 8]
    assert hist_resumed == list(range(12, end, 4))
