"""The test-only statistics `toy_rms` and `toy_mean_abs` (each one module,
as those of `keras_gradmon.core.statistics` are), registered for a test, and
the check of their batched rows: shared by the TensorFlow and JAX tests."""

import contextlib

import numpy as np

from keras_gradmon.columns import STATISTICS
from keras_gradmon.core import statistics as registry
from tests.reference import assert_rows_close
from tests.stats import toy_mean_abs, toy_rms

#: The columns of `batched_statistics(tensors, NAMES)` (`registry.columns`).
NAMES = (*STATISTICS, "rms", "mean_abs")


@contextlib.contextmanager
def registered():
    """The toys registered within the block, unregistered after it."""
    added = [registry.register(m.STATISTIC) for m in (toy_rms, toy_mean_abs)]
    try:
        yield
    finally:
        for statistic in added:
            registry.unregister(statistic.name)


def assert_toy_rows(rows, alone, held) -> None:
    """`rows` of `batched_statistics(tensors, NAMES)` against `alone`, those
    of `batched_statistics(tensors)`, and the references of the values
    `held`: rms everywhere (its careful path: squares above float32's max),
    mean_abs where its sum of magnitudes fits (it has no careful path)."""
    rows = np.asarray(rows)
    # The statistics of the schema, bit for bit as without the toys.
    np.testing.assert_array_equal(rows[:, : len(STATISTICS)], alone)
    assert_rows_close(rows[:, :-1], held, NAMES[:-1])
    fits = [i for i, v in enumerate(held) if toy_mean_abs.fits(v)]
    assert len(fits) > len(held) // 2
    assert_rows_close(rows[fits], [held[i] for i in fits], NAMES)
