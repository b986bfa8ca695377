"""Where a monitored tf-agents DQN step spends its time, op by op.

TensorFlow's profiler traces calls of the DQN train step of
`bench_tfagents.py` (a plain graph: tf-agents runs its step without XLA);
the trace (`xplane.pb`) is read back with TensorFlow's own protobuf, and
each op type's time is summed over the executor threads and divided by
the calls. Variants, beside the plain step:

  global   statistics every step: the gradients' global numbers only
           (no per-variable tags, weights or update ratios).
  every1   statistics every step, no histograms.
  every1h  statistics and histograms every step.

The profiler's own overhead is in every figure: compare the columns with
each other, not with wall times.

    TF_USE_LEGACY_KERAS=1 .venv/bin/python benchmarks/profile_tfagents.py
    ... benchmarks/profile_tfagents.py --variants every1h --top 40
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import collections
import glob
import tempfile

import tensorflow as tf
from bench_tfagents import experience, make_train
from tensorflow.tsl.profiler.protobuf import xplane_pb2

EVERY = {"every_n_steps": 1, "histogram_every_n_steps": None}
VARIANTS = {
    "plain": None,
    "global": {
        **EVERY,
        "per_variable": False,
        "weight_statistics": False,
        "update_statistics": False,
    },
    "every1": EVERY,
    "every1h": {"every_n_steps": 1, "histogram_every_n_steps": 1},
}
#: Trace events that contain the ops, not ops themselves.
_FRAMES = {
    "train", "TFE_Py_ExecuteCancelable", "EagerExecute", "EagerKernelExecute",
    "Run", "Process", "FunctionRun",
}  # fmt: skip


def op_times(monitor: dict | None, calls: int) -> collections.Counter:
    """Microseconds a call by op type, over `calls` profiled calls."""
    exp = experience()
    with tf.summary.create_file_writer(tempfile.mkdtemp()).as_default():
        train = make_train(False, monitor)
        for _ in range(30):
            train(exp)  # trace and warm up
        trace = tempfile.mkdtemp(prefix="profile_tfagents_")
        tf.profiler.experimental.start(trace)
        for _ in range(calls):
            train(exp)
        tf.profiler.experimental.stop()
    [path] = glob.glob(os.path.join(trace, "**", "*.xplane.pb"), recursive=True)
    space = xplane_pb2.XSpace()
    with open(path, "rb") as file:
        space.ParseFromString(file.read())
    times: collections.Counter = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                kind = name.rsplit(":", 1)[-1]
                if kind not in _FRAMES and not kind.startswith(" __inference"):
                    times[kind] += event.duration_ps / 1e6 / calls
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="plain,global,every1,every1h")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    names = args.variants.split(",")
    names = names if "plain" in names else ["plain", *names]
    times = {name: op_times(VARIANTS[name], args.calls) for name in names}
    kinds = set().union(*times.values())
    last = names[-1]
    order = sorted(kinds, key=lambda k: times["plain"][k] - times[last][k])
    print("us a call by op type: " + ", ".join(names))
    for kind in order[: args.top]:
        row = " ".join(f"{times[name][kind]:8.1f}" for name in names)
        print(f"{kind:30s} {row}")
    totals = " ".join(f"{sum(times[name].values()):8.1f}" for name in names)
    print(f"{'(all ops)':30s} {totals}")


if __name__ == "__main__":
    main()
