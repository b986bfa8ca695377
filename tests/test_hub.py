"""One hub feeds every recorder: a recorder written as one class here (CSV
rows) receives the gradient, activation and alert numbers of a `fit`, the
same numbers TensorBoard gets (tests/agents/rl/test_hub.py adds RL)."""

from __future__ import annotations

import csv
import os
from collections import defaultdict

import keras
import numpy as np
import pytest

from keras_gradmon import (
    ActivationMonitorCallback,
    GradientAlertCallback,
    GradientMonitorOptimizer,
    GradientSummaryCallback,
)
from keras_gradmon.alerts import ThresholdRule
from keras_gradmon.hub import Hub, Publication
from keras_gradmon.recorders.tensorboard import TensorBoardRecorder
from tests.helpers import LOSS, data, gradients, mlp
from tests.reference import load_events, scalar_series


class CsvRecorder:
    """The whole of a new recorder: `step,tag,value` rows in a CSV file."""

    def __init__(self, path: os.PathLike) -> None:
        self.path = os.fspath(path)

    @property
    def destination(self) -> str:
        return os.path.realpath(self.path)

    def _rows(self, rows) -> None:
        with open(self.path, "a", newline="", encoding="utf-8") as file:
            csv.writer(file).writerows(rows)

    def write_scalars(self, values, step) -> None:
        self._rows((int(step), t, repr(float(v))) for t, v in values.items())

    def write_histograms(self, histograms, step) -> None:
        self._rows((int(step), t, f"{len(h)} buckets") for t, h in histograms.items())

    def write_text(self, tag, lines, step) -> None:
        self._rows((int(step), tag, line) for line in lines)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def read_csv(path) -> dict[str, dict[int, str]]:
    """`{tag: {step: value text}}` (the last line of a text entry)."""
    series: dict[str, dict[int, str]] = defaultdict(dict)
    with open(path, newline="", encoding="utf-8") as file:
        for step, tag, value in csv.reader(file):
            series[tag][int(step)] = value
    return series


def _fit(tmp_path, hub: Hub) -> tuple[list[np.ndarray], np.ndarray]:
    x, y = data(n=64)
    probe = data(n=32, seed=1)[0]
    model = mlp()
    grads = gradients(model, x[:16], y[:16])  # step 0's batch
    kernel, bias = model.get_layer("hidden").get_weights()
    hidden = np.maximum(probe.astype(np.float64) @ kernel + bias, 0.0)
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.05), every_n_steps=2)
    model.compile(optimizer, LOSS)
    callbacks = [
        GradientSummaryCallback(hub=hub),
        ActivationMonitorCallback(probe, every_n_steps=2, hub=hub),
        # Fires at every summary: its flag and text go through the hub too.
        GradientAlertCallback(rules=[ThresholdRule(warning=1e-9)], hub=hub),
    ]
    model.fit(x, y, batch_size=16, shuffle=False, verbose=0, callbacks=callbacks)
    hub.close()
    return grads, hidden


def test_one_recorder_class_gets_every_monitors_numbers(tmp_path):
    published = []
    hub = Hub([CsvRecorder(tmp_path / "all.csv")])
    hub.add(TensorBoardRecorder(str(tmp_path / "tb")))
    norms = {}  # what a listener reads: the alert rules' metrics

    def listen(publication: Publication) -> None:
        published.append((publication.source, publication.step))
        if "grad_norm" in publication.metrics:  # not its histograms
            norms[publication.step] = publication.metrics["grad_norm"]["global"]

    hub.subscribe(listen)
    grads, hidden = _fit(tmp_path, hub)
    rows = read_csv(tmp_path / "all.csv")
    events = load_events(str(tmp_path / "tb"))
    assert sorted(set(published)) == [
        (source, step)
        for source in ("activations", "alerts", "gradients")
        for step in (0, 2)
    ]
    # Gradients, activations, alerts, each at its due steps, with the
    # reference values (float64 NumPy) of step 0.
    norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads))
    assert rows["grad_norm/global"].keys() == {0, 2} == norms.keys()
    assert norms[0] == pytest.approx(norm, rel=2e-5)
    assert float(rows["grad_norm/global"][0]) == pytest.approx(norm, rel=2e-5)
    assert rows["activation_std/mlp/hidden"].keys() == {0, 2}
    assert float(rows["activation_std/mlp/hidden"][0]) == pytest.approx(
        hidden.std(), rel=2e-6
    )
    assert rows["activation_hist/mlp/hidden"] == {0: "30 buckets", 2: "30 buckets"}
    assert rows["alerts/threshold"] == {0: "1.0", 2: "1.0"}
    assert '"rule": "threshold"' in rows["alert_log/all"][0]
    # Every scalar the CSV got, TensorBoard got too (as float32): the
    # per-variable ones in its table, the CSV recorder (no `write_table`)
    # as scalars.
    assert set(events.tables) == {"keras_gradmon/variables"}
    assert "grad_std/mlp/hidden/kernel" in rows
    alerts = {"alert_log/all", "keras_gradmon/alerts"}
    scalars = set(events.Tags()["tensors"]) - {*alerts, *events.tables}
    scalars -= {t for t in scalars if "_hist/" in t}
    assert scalars == {t for t in rows if t != "alert_log/all" and "_hist/" not in t}
    for tag in scalars:
        expected = {s: np.float32(float(v)) for s, v in rows[tag].items()}
        np.testing.assert_array_equal(
            list(scalar_series(events, tag).items()), list(expected.items()), tag
        )


def test_publications_go_to_recorders_and_to_their_listeners(tmp_path):
    hub = Hub([CsvRecorder(tmp_path / "a.csv")])
    mine, everything = [], []
    origin = object()
    assert not hub.listens_to(origin)
    hub.subscribe(mine.append, origin=origin)
    assert hub.listens_to(origin) and not hub.listens_to(object())
    hub.subscribe(everything.append)
    assert hub.listens_to(object())
    ours = Publication(
        4, "rl", {"rl/x": 1.5}, texts={"note": ["a", "b"]}, origin=origin
    )
    listeners_only = Publication(5, "gradients", {"y": 2.0}, record=False)
    hub.publish(ours)
    hub.publish(listeners_only)
    assert mine == [ours]
    assert everything == [ours, listeners_only]
    assert read_csv(tmp_path / "a.csv") == {"rl/x": {4: "1.5"}, "note": {4: "b"}}


@pytest.mark.parametrize("bad", [[42], "logs", [object()]])
def test_a_recorder_must_implement_the_protocol(bad):
    with pytest.raises(ValueError, match=r"Recorder protocol|list of recorders"):
        Hub(bad)


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: ActivationMonitorCallback(data(n=8)[0], **kw),
        GradientSummaryCallback,
        GradientAlertCallback,
    ],
    ids=["activations", "gradients", "alerts"],
)
def test_a_hub_replaces_log_dir_not_both(tmp_path, make):
    with pytest.raises(ValueError, match="Pass `hub` or `log_dir`"):
        make(log_dir=str(tmp_path), hub=Hub())
