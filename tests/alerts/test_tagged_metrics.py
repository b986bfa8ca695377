"""What the alert rules are fed from a real monitor's summary: every global,
group and step-wide scalar tag by statistic and subject (per-variable values
of `grad_norm` and `grad_nonfinite` only)."""

import keras

from keras_gradmon import GradientMonitorOptimizer
from keras_gradmon.writer import TaggedMetrics, summary_metrics
from tests.helpers import LOSS, data, mlp


def test_rules_see_the_scalar_tags_of_global_groups_and_the_step():
    x, y = data()
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.01),
        clipping={"method": "global_norm", "max_norm": 1e-3},
        every_n_steps=1,
        histogram_every_n_steps=None,
        weight_statistics=True,
        groups={"head": "head"},
        tag_scope="actor",
    )
    model.compile(optimizer, LOSS)
    model.fit(x, y, batch_size=64, epochs=2, verbose=0)
    monitor = optimizer.monitor
    snapshot = monitor.snapshot()
    metrics = summary_metrics(snapshot, TaggedMetrics(monitor.tags, monitor.paths))
    written = monitor.tags.scalar_values(snapshot.values, snapshot.has_grad)
    written |= monitor.tags.table.table(snapshot.values).scalars()
    expected = {}
    for name, value in written.items():
        statistic, _, subject = name.partition("/actor/")
        if subject not in monitor.paths or statistic in ("grad_norm", "grad_nonfinite"):
            expected.setdefault(statistic, {})[subject] = value
    assert set(metrics["clip"]) == {"pre_norm", "post_norm", "scale", "fraction"}
    assert metrics["clip"]["fraction"] == 1.0
    assert set(metrics["weight_norm"]) == {"global", "head"}
    assert {k: v for k, v in metrics.items() if k != "grad_nonfinite"} == {
        k: v for k, v in expected.items() if k != "grad_nonfinite"
    }
    assert not any(s.startswith("weight_") and s != "weight_norm" for s in metrics)
