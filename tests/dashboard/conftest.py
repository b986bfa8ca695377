"""Shared logs for the dashboard's tests: one real fit (a tiny MLP, every
step, histograms and activations every 5 steps, a threshold rule low enough
to fire), a copy of it under a hostile run name, and damaged runs."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.dashboard.client import alerting_fit
from tests.report.writers import write_simple_values

#: The run named to break a page that writes names as HTML.
HOSTILE = "<img src=x onerror=alert(1)>"
STEPS = 20


@pytest.fixture(scope="session")
def fit_logs(tmp_path_factory):
    """`(log_dir, alerts fired)`: run `fit` and its copy named `HOSTILE`."""
    log_dir = tmp_path_factory.mktemp("dashboard")
    fired = alerting_fit(str(log_dir / "fit"), 64, every=5, epochs=5)
    shutil.copytree(log_dir / "fit", log_dir / HOSTILE)
    return log_dir, fired


def write_table(log_dir: str, dtype: int, content: bytes) -> None:
    """One `keras_gradmon/variables` table event (rows `dense/kernel`,
    `dense/bias`; columns `grad_present`, `grad_norm`) of tensor `dtype`
    (a `types_pb2` enum) whose bytes are `content`, written with
    TensorBoard's own `EventFileWriter`."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
    from tensorboard.compat.proto import tensor_shape_pb2 as shape_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    names = {"kind": "variables", "version": 1, "scope": None}
    names.update(
        rows=["dense/kernel", "dense/bias"], columns=["grad_present", "grad_norm"]
    )
    plugin = summary_pb2.SummaryMetadata.PluginData(
        plugin_name="keras_gradmon", content=json.dumps(names).encode()
    )
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=plugin, data_class=summary_pb2.DATA_CLASS_TENSOR
    )
    shape = shape_pb2.TensorShapeProto(
        dim=[shape_pb2.TensorShapeProto.Dim(size=n) for n in (2, 2)]
    )
    if dtype == types_pb2.DT_STRING:
        tensor = tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape)
        tensor.string_val.extend([content] * 4)
    else:
        tensor = tensor_pb2.TensorProto(
            dtype=dtype, tensor_shape=shape, tensor_content=content
        )
    value = summary_pb2.Summary.Value(
        tag="keras_gradmon/variables", metadata=metadata, tensor=tensor
    )
    os.makedirs(log_dir, exist_ok=True)
    writer = EventFileWriter(log_dir)
    writer.add_event(
        event_pb2.Event(step=0, summary=summary_pb2.Summary(value=[value]))
    )
    writer.close()


@pytest.fixture(scope="session")
def bad_logs(fit_logs, tmp_path_factory):
    """Runs `truncated` (the fit's table file cut inside its last record),
    `nonfinite` (per-variable scalars NaN and +Inf at every step),
    `one_step` (one step of per-variable scalars), `no_gradmon` (a
    Keras loss curve only), `short_tensor` (a table whose tensor holds 3
    bytes, which TensorBoard's reader cannot read) and `text_table` (a
    table of strings)."""
    log_dir = tmp_path_factory.mktemp("bad")
    source = fit_logs[0] / "fit"
    os.makedirs(log_dir / "truncated")
    for name in os.listdir(source):
        data = (source / name).read_bytes()
        (log_dir / "truncated" / name).write_bytes(data[: len(data) * 2 // 3])
    nan, inf = float("nan"), float("inf")
    write_simple_values(
        str(log_dir / "nonfinite"),
        {
            "grad_norm/global": {s: nan for s in range(5)},
            "grad_norm/dense/kernel": {s: nan for s in range(5)},
            "grad_norm/dense/bias": {s: inf for s in range(5)},
        },
    )
    write_simple_values(
        str(log_dir / "one_step"),
        {"grad_norm/global": {7: 2.0}, "grad_norm/dense/kernel": {7: 1.5}},
    )
    write_simple_values(str(log_dir / "no_gradmon"), {"epoch_loss": {0: 1.0, 1: 0.5}})
    from tensorboard.compat.proto import types_pb2

    # 3 bytes where 4 floats belong: TensorBoard's own reader raises on it.
    write_table(str(log_dir / "short_tensor"), types_pb2.DT_FLOAT, b"\0\0\0")
    write_table(str(log_dir / "text_table"), types_pb2.DT_STRING, b"x")
    return log_dir
