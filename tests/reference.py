"""NumPy float64 references and TensorBoard event readers for the tests."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
from tensorboard.backend.event_processing import event_accumulator

from keras_gradmon.columns import STATISTICS
from keras_gradmon.core import statistics as registry


def flush_subnormals(values: np.ndarray) -> np.ndarray:
    """Float32 subnormals set to zero, as TensorFlow's CPU kernels treat them."""
    values = np.array(values, np.float32)
    values[np.abs(values) < np.finfo(np.float32).tiny] = 0.0
    return values


def reference_statistics(values, names=STATISTICS) -> dict[str, float]:
    """The statistics `names` of the finite elements of `values`, in float64:
    each registered statistic's own NumPy reference."""
    return {s.name: s.reference_value(values) for s in registry.lookup(names)}


def assert_statistics_close(actual: dict, expected: dict, rtol: float = 2e-6) -> None:
    """Compares statistics with a tolerance relative to the data's scale."""
    scale = expected["max_abs"]
    for name, want in expected.items():
        got = float(actual[name])
        if np.isnan(want):
            assert np.isnan(got), (name, got, want)
            continue
        if name == "nonfinite":
            assert got == want, (name, got, want)
            continue
        if name == "zero_fraction":  # a float32 ratio of exact counts
            assert abs(got - want) <= 1e-7 * want, (name, got, want)
            continue
        with np.errstate(over="ignore"):
            if np.isinf(np.float32(want)):  # the true value exceeds float32
                assert got == np.float32(want), (name, got, want)
                continue
        tol = rtol * max(scale, abs(want)) + 1e-300
        if name == "norm":
            tol = rtol * 4 * want + 1e-300
        tiny = float(np.finfo(np.float32).tiny)
        if abs(want) < tiny:
            # A float32 result below the smallest normal number is flushed
            # to zero by TensorFlow's CPU kernels (e.g. the mean of
            # [0, 1.1754944e-38]).
            tol = max(tol, tiny)
        assert abs(got - want) <= tol, (name, got, want, tol)


def assert_rows_close(rows, held, names=STATISTICS) -> None:
    """`batched_statistics(tensors, names)`'s rows against the references of
    the values `held`: `names` close, the other columns NaN."""
    columns = registry.columns(names)
    rows = np.asarray(rows)
    assert rows.shape == (len(held), len(columns)), rows.shape
    for row, values in zip(rows, held):
        expected = reference_statistics(values, columns)
        actual = dict(zip(columns, row.tolist()))
        assert_statistics_close({**expected, **{n: actual[n] for n in names}}, expected)
        assert all(np.isnan(actual[n]) for n in columns if n not in names), actual


def reference_histogram(values, buckets: int) -> tuple[np.ndarray, float, float]:
    """TensorBoard-convention bucket counts of the finite elements."""
    a = np.asarray(values, dtype=np.float64).ravel()
    a = a[np.isfinite(a)]
    if a.size == 0:
        return np.zeros(buckets, np.int64), 0.0, 0.0
    low, high = a.min(), a.max()
    if low == high:
        counts = np.zeros(buckets, np.int64)
        counts[-1] = a.size
        return counts, low, high
    index = np.minimum(np.floor((a - low) / (high - low) * buckets), buckets - 1)
    return np.bincount(index.astype(int), minlength=buckets), low, high


def hard_cases() -> list[np.ndarray]:
    """Float32 tensors that break naive statistics: squares that overflow or
    underflow, a norm above float32's max, cancellation, an outlier shift,
    constants, zeros, an empty tensor, all-NaN, +-Inf, a NaN first element."""
    rng = np.random.default_rng(0)
    big = np.full([5000], 1e36, np.float32)
    big[0] = -3e38
    first_nan = rng.normal(size=300).astype(np.float32) + 7.0
    first_nan[0] = np.nan
    return [
        big,
        np.array([3e38, 3e38, -3e38], np.float32),  # the norm is above the max
        (rng.normal(size=4000) * 1e-30).astype(np.float32),
        (1e4 + rng.normal(size=3000) * 1e-3).astype(np.float32),  # cancels
        np.array([100.0] + [0.5, -0.5] * 50, np.float32),  # an outlier shift
        np.full([70], 2.5, np.float32),
        np.zeros([3, 4], np.float32),
        np.zeros([0], np.float32),
        np.full([9], np.nan, np.float32),
        np.array([np.inf, -np.inf, 1.0, 0.0], np.float32),
        first_nan,
        rng.normal(size=(64, 33)).astype(np.float32),
    ]


def alone_cases() -> list[np.ndarray]:
    """`hard_cases` at 192 elements (3 blocks of 64: each its own matrix in
    `batched_statistics`, reshaped and reduced without a mask first), one
    whose 3 shift samples are all NaN, and a small tensor packed beside."""
    held = [np.resize(v, [3, 64]) for v in hard_cases() if v.size]
    samples_nan = np.full([192], 5.0, np.float32)
    samples_nan[[0, 96, 191]] = np.nan
    return [*held, samples_nan, np.array([1.0, -2.0, 0.0], np.float32)]


def load_events(log_dir: str) -> Events:
    """All scalars, tensors and histograms under `log_dir`, read by
    TensorBoard, each per-variable table also read as its scalar tags."""
    files = glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))
    assert files, f"no event file in {log_dir}"
    accumulator = event_accumulator.EventAccumulator(
        log_dir,
        size_guidance={
            event_accumulator.SCALARS: 0,
            event_accumulator.TENSORS: 0,
            event_accumulator.HISTOGRAMS: 0,
        },
    )
    accumulator.Reload()
    return Events(accumulator)


class Events:
    """TensorBoard's `EventAccumulator` of a run, where each keras_gradmon
    table (plugin `keras_gradmon`: a `[variables, columns]` tensor a step,
    the names in its metadata) also reads as the scalar tags
    `<column>/[<scope>/]<variable>` it stands for: `grad_*` and the update
    ratio where the variable had a gradient (`grad_present`), the ratios
    where finite. Read here with JSON and NumPy alone, apart from the
    library's own reading. `Tags()` lists those scalar tags in the tables'
    place; `tables` holds each table tag's names, `raw` is the accumulator
    itself."""

    def __init__(self, accumulator: event_accumulator.EventAccumulator) -> None:
        self.raw = accumulator
        self.tables: dict[str, dict] = {}
        self._expanded: dict[str, list] = {}
        for name in accumulator.Tags()["tensors"]:
            metadata = accumulator.SummaryMetadata(name)
            if metadata.plugin_data.plugin_name == "keras_gradmon":
                names = json.loads(metadata.plugin_data.content)
                if names.get("kind") == "variables":  # not the alerts
                    self.tables[name] = names
                    self._expand(name, names)

    def _expand(self, name: str, names: dict) -> None:
        from tensorboard.backend.event_processing.event_accumulator import (
            TensorEvent,
        )
        from tensorboard.util import tensor_util

        rows, columns, scope = names["rows"], names["columns"], names["scope"]
        for event in self.raw.Tensors(name):
            values = tensor_util.make_ndarray(event.tensor_proto)
            assert values.shape == (len(rows), len(columns)), (name, values.shape)
            for r, row in enumerate(rows):
                present = values[r, columns.index("grad_present")] > 0
                for c, column in enumerate(columns):
                    value = values[r, c]
                    needs = column.startswith(("grad_", "update_ratio"))
                    if column == "grad_present" or (needs and not present):
                        continue
                    ratio = column in ("grad_to_weight", "update_ratio")
                    if ratio and not np.isfinite(value):
                        continue
                    tag = f"{column}/{scope}/{row}" if scope else f"{column}/{row}"
                    proto = tensor_util.make_tensor_proto(np.float32(value))
                    self._expanded.setdefault(tag, []).append(
                        TensorEvent(event.wall_time, event.step, proto)
                    )

    def Tags(self) -> dict:
        tags = dict(self.raw.Tags())
        listed = [t for t in tags["tensors"] if t not in self.tables]
        tags["tensors"] = [*listed, *self._expanded]
        return tags

    def Tensors(self, tag: str) -> list:
        if tag in self._expanded:
            return self._expanded[tag]
        return self.raw.Tensors(tag)

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


def scalar_series(events, tag: str) -> dict[int, float]:
    """`{step: value}` of a scalar tag written with `tf.summary.scalar`."""
    from tensorboard.util import tensor_util

    return {
        e.step: float(tensor_util.make_ndarray(e.tensor_proto))
        for e in events.Tensors(tag)
    }


def alert_records(events, scope: str | None = None) -> list[dict]:
    """The alerts (`Alert.to_dict()`) of a run's `keras_gradmon/alerts` tag
    (`keras_gradmon/<scope>/alerts`), read with JSON alone: the last event
    of each step, which holds every alert of that step, in step order."""
    from tensorboard.util import tensor_util

    tag = f"keras_gradmon/{scope}/alerts" if scope else "keras_gradmon/alerts"
    last = {e.step: e for e in events.Tensors(tag)}
    return [
        json.loads(line)
        for step in sorted(last)
        for line in tensor_util.make_ndarray(last[step].tensor_proto)
    ]


def histogram_series(events, tag: str) -> dict[int, np.ndarray]:
    """`{step: [k, 3] buckets}` of a histogram tag."""
    from tensorboard.util import tensor_util

    return {
        e.step: tensor_util.make_ndarray(e.tensor_proto) for e in events.Tensors(tag)
    }
