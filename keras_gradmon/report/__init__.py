"""`keras-gradmon report`: a training-health report from TensorBoard logs.

`load_runs` reads event files (every record's checksum verified, no
TensorFlow import) through `records`, `events` and the source-independent
`accumulator.RunAccumulator` (which TensorBoard's dashboard feeds too),
each tag's points bounded in memory (`series.Series`); `analyze_run`
turns one run's gradient and activation numbers into a `RunReport` (with
the final loss of `losses.final_loss`: Keras's `epoch_loss` or tf-agents'
`Losses/*`) and `analyze_rl` its RL numbers into `RLReport`s (pure NumPy),
`group_reports` aggregates RL runs across seeds, and `render` and
`html_page` write the console text, PNG plots and a self-contained HTML
page.
"""
