"""The statistics of `keras_gradmon.schema.STATISTICS`, one module each,
named after it and defining it as `STATISTIC` (a
`keras_gradmon.stats.statistic.Statistic`); `keras_gradmon.stats.registry`
loads them by name. A new statistic is one module here and its name in
`STATISTICS` (which places its column in the monitor's state)."""
