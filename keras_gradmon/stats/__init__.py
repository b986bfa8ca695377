"""Pure, XLA-safe statistic functions.

Everything here is plain tensor math: no `tf.summary`, no string ops, no
Python control flow on tensor values, so it compiles under
`tf.function(jit_compile=True)`. Each statistic is one registered object
(`statistic.Statistic`: its reductions, how they finish, its careful path,
its NumPy reference), one module each in `statistics/`, held by
`registry.py`. `batched.py` computes the statistics and histograms of many
tensors in one program that does not grow with their number; the
per-tensor functions are its one-tensor case.
"""

from keras_gradmon.stats.batched import (
    STATISTICS,
    batched_bucket_counts,
    batched_statistics,
)
from keras_gradmon.stats.histogram import bucket_counts
from keras_gradmon.stats.moments import stack_statistics, tensor_statistics
from keras_gradmon.stats.norms import batched_global_norm, combine_norms

__all__ = [
    "STATISTICS",
    "batched_bucket_counts",
    "batched_global_norm",
    "batched_statistics",
    "bucket_counts",
    "combine_norms",
    "stack_statistics",
    "tensor_statistics",
]
