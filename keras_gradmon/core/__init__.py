"""The step kernel: what runs inside the compiled train step, in `keras.ops`,
the same on every Keras backend.

`GradientMonitor` (`monitor.py`) clips, decides whether a step is applied,
and measures on due steps; `measurement.py` is what one summary measures;
`state.py` the variables and rings it writes, as pure functions of their
values; `statistics.py` and `batched.py` the per-tensor statistics, computed
for many tensors in one program; `histogram.py`, `signals.py`,
`noise_scale.py`, `loss_scale.py` and `clipping/` the rest of the step;
`config.py` its options (`MonitorConfig`). Nothing here imports the host's
rooms (publishing, recorders, alerts, callbacks, report).
"""
