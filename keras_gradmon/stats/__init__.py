"""Pure, XLA-safe statistic functions.

Everything here is plain tensor math: no `tf.summary`, no string ops, no
Python control flow on tensor values, so it compiles under
`tf.function(jit_compile=True)`.
"""

from keras_gradmon.stats.histogram import bucket_counts
from keras_gradmon.stats.moments import (
    STATISTICS,
    stack_statistics,
    tensor_statistics,
)
from keras_gradmon.stats.norms import combine_norms

__all__ = [
    "STATISTICS",
    "bucket_counts",
    "combine_norms",
    "stack_statistics",
    "tensor_statistics",
]
