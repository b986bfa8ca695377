"""`RunningLevel` against NumPy float64 over the samples it should keep."""

from __future__ import annotations

import math

import numpy as np
import pytest

from keras_gradmon.alerts.scale import RunningLevel


@pytest.mark.parametrize(("every", "window"), [(1, 1000), (7, 1000), (100, 1000)])
def test_median_and_std_of_the_window_match_numpy(every, window):
    rng = np.random.default_rng(every)
    level = RunningLevel(window)
    kept: list[tuple[int, float]] = []
    seen: list[tuple[int, float]] = []
    for step in range(0, 30_000, every):
        value = float(rng.lognormal(-10.0 + step / 3_000, 0.5))
        level.add(step, value)
        seen.append((step, value))
        # The reference: one sample per stride, those of the last `window`
        # steps, or the last 20 summaries kept when they span more.
        if not kept or step - kept[-1][0] >= level.stride:
            kept.append((step, math.log(value)))
        while len(kept) > 20 and step - kept[0][0] > window:
            kept.pop(0)
        if step % (50 * every) == 0:
            logs = np.array([y for _, y in kept])
            assert len(level) == len(logs)
            assert level.log_median() == float(np.median(logs))
            assert level.log_std() == pytest.approx(float(np.std(logs)), rel=1e-9)
            assert level.span(step + 1) == step + 1 - kept[0][0]
            # The peak: every value since the oldest sample, thinned or not.
            since = [v for s, v in seen if s >= kept[0][0]]
            assert level.peak() == pytest.approx(max(since), rel=1e-12)
    assert len(level) <= 20 + window // level.stride + 1
    assert level.stride == 3  # 1000 // 256


def test_non_positive_and_non_finite_values_are_ignored():
    level = RunningLevel(100)
    for value in (0.0, -1.0, math.nan, math.inf):
        level.add(1, value)
    assert len(level) == 0 and level.span(5) == 0
    level.add(2, math.e)
    assert (len(level), level.log_median(), level.log_std()) == (1, 1.0, 0.0)
