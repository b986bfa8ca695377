"""Damaged event files are named, with what was read from them; a LOGDIR
that is a file gets its own message. The files are real: written with
tf.summary, then cut short or garbled."""

from __future__ import annotations

import os
import struct

import numpy as np
import tensorflow as tf

from keras_gradmon.cli import EXIT_ERROR, main
from keras_gradmon.report.events import load_runs, read_records

STEPS = 40


def _write(log_dir: str) -> str:
    """`grad_norm/global` = step + 1 at steps 0..39, one event per step."""
    writer = tf.summary.create_file_writer(log_dir)
    with writer.as_default():
        for step in range(STEPS):
            tf.summary.scalar("grad_norm/global", float(step + 1), step=step)
    writer.close()
    (name,) = [f for f in os.listdir(log_dir) if f.startswith("events.out")]
    return os.path.join(log_dir, name)


def _offsets(path: str) -> list[tuple[int, int]]:
    """`(offset, data length)` of each record, from the framing."""
    with open(path, "rb") as file:
        data = file.read()
    offset, found = 0, []
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        found.append((offset, length))
        offset += 12 + length + 4
    return found


def _report(capsys, *args):
    code = main(["report", *map(str, args), "--no-plots"])
    out, err = capsys.readouterr()
    return code, out, err


def test_intact_files_read_like_tensorboard(tmp_path):
    path = _write(str(tmp_path))
    records, damage = read_records(path)
    assert damage is None and len(records) == STEPS + 1  # + the file version
    (run,) = load_runs(str(tmp_path))
    assert run.scalars["grad_norm/global"] == {s: s + 1.0 for s in range(STEPS)}
    assert run.damaged == []


def test_a_file_cut_short_is_named_with_what_was_read(tmp_path, capsys):
    path = _write(str(tmp_path))
    offset, _ = _offsets(path)[31]  # the event of step 30
    with open(path, "r+b") as file:
        file.truncate(offset + 20)  # inside its data
    (run,) = load_runs(str(tmp_path))
    assert sorted(run.scalars["grad_norm/global"]) == list(range(30))
    (found,) = run.damaged
    assert found.steps == (0, 29) and found.events == 31 and found.damage.truncated
    code, out, err = _report(capsys, tmp_path)
    assert code == 0
    expected = (
        f"Damaged event file {path!r} ({offset + 20:,} bytes): the last record is "
        f"cut short, at byte {offset:,}; nothing after that point could be read. "
        "Read from it: 31 record(s), 31 event(s), steps 0 to 29."
    )
    assert expected in out and expected in err
    assert "max 30 at step 29" in out  # the readable part is reported


def test_garbled_bytes_are_skipped_and_the_rest_is_read(tmp_path, capsys):
    path = _write(str(tmp_path))
    offset, length = _offsets(path)[11]  # the event of step 10
    with open(path, "r+b") as file:
        file.seek(offset + 12 + length - 3)  # the value's bytes
        file.write(b"\xff\xfe\xfd")
    (run,) = load_runs(str(tmp_path))
    assert sorted(run.scalars["grad_norm/global"]) == [
        s for s in range(STEPS) if s != 10
    ]
    (found,) = run.damaged
    assert not found.damage.truncated and found.damage.skipped == 1
    _, out, _ = _report(capsys, tmp_path)
    assert (
        "1 record(s) fail their checksum (garbled bytes), skipped, at byte "
        f"{offset:,}; the records after it were read. Read from it: 40 record(s), "
        "40 event(s), steps 0 to 39. TensorBoard shows nothing of this file after "
        f"byte {offset:,}."
    ) in out


def test_a_garbled_length_ends_the_reading(tmp_path):
    path = _write(str(tmp_path))
    offset, _ = _offsets(path)[5]
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(struct.pack("<Q", 123))  # a wrong length that still fits
    (run,) = load_runs(str(tmp_path))
    (found,) = run.damaged
    assert found.damage.problem == "a record's length is garbled (fails its checksum)"
    assert found.damage.offset == offset and found.steps == (0, 3)


def test_a_file_of_garbage_is_an_error_not_missing_data(tmp_path, capsys):
    path = _write(str(tmp_path))
    size = os.path.getsize(path)
    with open(path, "wb") as file:
        file.write(np.random.default_rng(0).bytes(size))
    code, _, err = _report(capsys, tmp_path)
    assert code == EXIT_ERROR
    assert f"Damaged event file {path!r}" in err
    assert "Read from it: 0 record(s), 0 event(s)." in err


def test_logdir_that_is_a_file_gets_its_own_message(tmp_path, capsys):
    path = _write(str(tmp_path))
    code, _, err = _report(capsys, path)
    assert code == EXIT_ERROR
    assert "No such log directory" not in err
    assert (
        f"LOGDIR must be a directory, and {path!r} is a file. Pass the directory "
        f"that holds the event files (here perhaps {str(tmp_path)!r})."
    ) in err


def test_the_report_reads_without_tensorflow(tmp_path):
    import subprocess
    import sys

    _write(str(tmp_path))
    code = (
        "import sys; from keras_gradmon.cli import main; "
        f"main(['report', {str(tmp_path)!r}, '--no-plots']); "
        "sys.exit(3 if 'tensorflow' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
