"""The clipping-fraction rule on a real run: a Keras model whose every step
is clipped (max_norm far below the gradient norm), and one never clipped."""

import keras
import pytest

from keras_gradmon import GradientAlertCallback, GradientMonitorOptimizer
from keras_gradmon.alerts import ClipFractionRule, default_rules
from tests.helpers import LOSS, data, mlp
from tests.reference import load_events, scalar_series


@pytest.mark.parametrize(
    "max_norm, scope, fired",
    [(1e-3, None, [40]), (1e-3, "actor", [40]), (1e6, None, [])],
)
def test_a_run_clipped_at_every_step_warns_once(tmp_path, max_norm, scope, fired):
    x, y = data()
    model = mlp()
    model.compile(
        GradientMonitorOptimizer(
            keras.optimizers.SGD(0.01),
            clipping={"method": "global_norm", "max_norm": max_norm},
            every_n_steps=5,
            histogram_every_n_steps=None,
            tag_scope=scope,
        ),
        LOSS,
    )
    rules = {**default_rules(), "clip_fraction": ClipFractionRule(window=40)}
    callback = GradientAlertCallback(rules=rules, log_dir=str(tmp_path))
    model.fit(x, y, batch_size=8, epochs=8, verbose=0, callbacks=[callback])
    alerts = [a for a in callback.alerts if a.rule == "clip_fraction"]
    # Summaries at steps 0, 5, ..., 60 cover 1, 5, 5, ... steps: the window
    # of 40 steps is whole at step 40, and the episode is said once.
    assert [a.step for a in alerts] == fired
    flag = f"alerts/{scope}/clip_fraction" if scope else "alerts/clip_fraction"
    flags = scalar_series(load_events(str(tmp_path)), flag)
    assert sorted(flags) == list(range(0, 64, 5))
    assert [s for s, v in flags.items() if v] == fired
    if fired:
        (alert,) = alerts
        assert alert.value == 1.0 and alert.threshold == 0.5
        assert "lower the learning rate, or raise max_norm" in alert.message
        assert alert.message.startswith(
            "WARNING clipping fraction at step 40: clip/fraction of 'global' = 1 "
            "> 0.5 over the last 40 steps."
        )
    assert not [a for a in callback.alerts if a.rule != "clip_fraction"]
