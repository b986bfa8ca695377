"""Runs distributed scenarios in a fresh process and pickles their results.

Logical devices must be configured before TensorFlow initializes its
devices, which the test process did long ago, so each distributed test
starts this as a new process:

    python -m tests.distribute.runner mirrored OUT_DIR
    python -m tests.distribute.runner worker OUT_DIR INDEX PORT,PORT

`mirrored`: two logical CPUs, every MirroredStrategy scenario and its
one-device reference; `worker`: one worker of a two-worker
MultiWorkerMirroredStrategy on 127.0.0.1 (TF_CONFIG set here).
"""

from __future__ import annotations

import json
import os
import pickle
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: The options of the monitored runs.
STATS = {"every_n_steps": 1, "histogram_every_n_steps": 2, "groups": {"head": "head"}}
CLIP = {"every_n_steps": 1, "clipping": {"method": "global_norm", "max_norm": 0.3}}
SKIP = {"every_n_steps": 1, "skip_nonfinite": True}
MIXED_SCALE = 2.0**23  # too large for the first steps: the scaler skips some


def _two_cpus() -> None:
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2
    )


def mirrored(out_dir: str) -> dict:
    _two_cpus()
    import keras
    import tensorflow as tf

    from tests.distribute import scenarios

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    logs = os.path.join(out_dir, "logs")
    results = {
        "stats": scenarios.fit_run(strategy, STATS, log_dir=logs, epochs=2),
        "stats_plain": scenarios.fit_run(strategy, None, epochs=2),
        "stats_single": scenarios.fit_run(None, STATS, epochs=2),
        "clip": scenarios.fit_run(strategy, CLIP),
        "clip_single": scenarios.fit_run(None, CLIP),
        "skip": scenarios.loop_run(strategy, SKIP, poison_step=1),
        "skip_single": scenarios.loop_run(None, SKIP, poison_step=1),
    }
    keras.mixed_precision.set_global_policy("mixed_float16")
    mixed = {"every_n_steps": 1}
    results["mixed"] = scenarios.fit_run(
        strategy, mixed, epochs=2, loss_scale=MIXED_SCALE
    )
    results["mixed_single"] = scenarios.fit_run(
        None, mixed, epochs=2, loss_scale=MIXED_SCALE
    )
    keras.mixed_precision.set_global_policy("float32")
    return results


def worker(out_dir: str, index: int, ports: list[str]) -> dict:
    os.environ["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
            "task": {"type": "worker", "index": index},
        }
    )
    import tensorflow as tf

    from tests.distribute import scenarios

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    # Every worker is given the same directory: only the chief may write.
    result = scenarios.loop_run(strategy, CLIP, log_dir=os.path.join(out_dir, "logs"))
    result["writes"] = bool(strategy.extended.should_save_summary)
    return result


def main(argv: list[str]) -> None:
    kind, out_dir = argv[0], argv[1]
    if kind == "mirrored":
        results, name = mirrored(out_dir), "mirrored.pkl"
    else:
        index = int(argv[2])
        results, name = worker(out_dir, index, argv[3].split(",")), f"worker{index}.pkl"
    with open(os.path.join(out_dir, name), "wb") as f:
        pickle.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1:])
