"""The TensorFlow side of tests/jax/test_stats.py's parity test, run in a
process of its own: `KERAS_BACKEND=tensorflow python -m tests.jax.tf_side
IN.npz OUT.npz` computes the statistics of the cases in IN and saves them."""

from __future__ import annotations

import sys

import numpy as np


def main(source: str, target: str) -> None:
    """Computes what `test_stats.compute` does, on TensorFlow, eagerly."""
    from keras import ops

    from keras_gradmon.core import batched
    from tests.jax.cases import BUCKETS, NORM_CASES, as_dtype

    with np.load(source) as data:
        cases = {name: data[name] for name in data.files}
    tensors = [as_dtype(name, v, ops) for name, v in cases.items()]
    counts, ranges = batched.batched_bucket_counts(tensors, BUCKETS)
    values = [as_dtype(n, cases[n], ops) for n in NORM_CASES]
    norm, _ = batched.batched_global_norm(values)
    np.savez(
        target,
        rows=np.asarray(batched.batched_statistics(tensors)),
        counts=np.asarray(counts),
        ranges=np.asarray(ranges),
        norm=np.asarray(norm),
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
