"""Activation monitoring: statistics of chosen layers' outputs on a probe
batch, dead and saturated units, and their health alerts.

`ActivationMonitor` (`keras_gradmon.ActivationMonitor`) is the
framework-neutral piece, called after a custom-loop step or `agent.train`;
`keras_gradmon.ActivationMonitorCallback` runs it from `model.fit`.
"""
