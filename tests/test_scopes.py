"""Several monitored optimizers in one process: names are tag scopes, two
monitors never merge silently into one run, each reads back with one trace."""

from __future__ import annotations

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_gradmon import GradientMonitorOptimizer, GradientSummaryCallback
from tests.helpers import LOSS, data, mlp
from tests.reference import load_events, scalar_series


def _fit(optimizer, log_dir: str, n: int = 32) -> None:
    x, y = data(n=n)
    model = mlp()
    model.compile(optimizer, LOSS)
    model.fit(
        x, y, batch_size=16, verbose=0, callbacks=[GradientSummaryCallback(log_dir)]
    )


def test_a_name_is_the_default_tag_scope(tmp_path):
    actor = GradientMonitorOptimizer(
        keras.optimizers.SGD(), name="actor", every_n_steps=1
    )
    critic = GradientMonitorOptimizer(
        keras.optimizers.SGD(), name="critic>net", every_n_steps=1
    )
    explicit = GradientMonitorOptimizer(
        keras.optimizers.SGD(), name="actor2", tag_scope="mine"
    )
    assert actor.monitor_config.tag_scope == "actor"
    assert critic.monitor_config.tag_scope == "critic_net"  # made tag-safe
    assert explicit.monitor_config.tag_scope == "mine"
    unnamed = GradientMonitorOptimizer(keras.optimizers.SGD())
    assert unnamed.monitor_config.tag_scope is None  # Keras's made-up name is not
    restored = GradientMonitorOptimizer.from_config(unnamed.get_config())
    assert restored.monitor_config.tag_scope is None
    _fit(actor, str(tmp_path))
    _fit(critic, str(tmp_path))
    events = load_events(str(tmp_path))
    assert len(scalar_series(events, "grad_norm/actor/global")) == 2
    assert len(scalar_series(events, "grad_norm/critic_net/global")) == 2


def test_two_unnamed_optimizers_in_one_log_dir_are_refused(tmp_path):
    first = GradientMonitorOptimizer(keras.optimizers.SGD(), every_n_steps=1)
    second = GradientMonitorOptimizer(keras.optimizers.SGD(), every_n_steps=1)
    x, y = data(n=32)
    model = mlp()
    model.compile(first, LOSS)
    callback = GradientSummaryCallback(str(tmp_path))
    for _ in range(2):  # the same monitor again: one run
        model.fit(x, y, batch_size=16, verbose=0, callbacks=[callback])
    with pytest.raises(ValueError, match=r"would write unscoped tags to .*`name=`"):
        _fit(second, str(tmp_path))
    third = GradientMonitorOptimizer(keras.optimizers.SGD(), every_n_steps=1)
    _fit(third, str(tmp_path / "elsewhere"))  # another directory is fine
    points = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    assert sorted(points) == [0, 1, 2, 3]  # only the first optimizer's steps


_COLLECTED = """
import gc, sys
import keras
from keras_gradmon import GradientMonitorOptimizer
from tests.test_scopes import _fit

for _ in range(2):
    _fit(GradientMonitorOptimizer(keras.optimizers.SGD(), every_n_steps=1), sys.argv[1])
    gc.collect()
print("released")
"""


def test_a_collected_monitor_releases_its_log_dir(tmp_path):
    # In a fresh process: a collection in this one would also finalize
    # every monitor earlier tests left behind (a minute, late in the suite).
    result = subprocess.run(
        [sys.executable, "-c", _COLLECTED, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "released"


def test_interleaved_optimizers_read_back_their_own_numbers():
    optimizers = [
        GradientMonitorOptimizer(keras.optimizers.SGD(), every_n_steps=1, name=f"o{i}")
        for i in range(3)
    ]
    v = keras.Variable(np.ones(3, "float32"))
    for step in range(4):
        for i, optimizer in enumerate(optimizers):
            optimizer.apply([tf.fill([3], float(i + step))], [v])
        for i, optimizer in enumerate(optimizers):
            snapshot = optimizer.snapshot()
            assert snapshot.step == step
            expected = np.sqrt(3.0) * (i + step)
            assert snapshot.totals["grad_norm"] == pytest.approx(expected)
