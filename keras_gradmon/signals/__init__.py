"""Signals computed in the step beside the statistics: each is one module
that owns its state (`state_spec()`), updates it with pure functions of the
state values, and hands its numbers to the next summary.

- `spikes`: the largest and smallest global norm between two summaries.
- `skip_spikes`: skips a step whose norm is a spike (a z-score over a window).
- `update_ratio`: ||w_after - w_before|| / ||w_before||, per variable,
  group and globally.
- `noise_scale`: the gradient noise scale B_simple (McCandlish et al. 2018).
"""
