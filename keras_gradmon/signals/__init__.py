"""Signals computed in the train step beside the per-variable statistics
(issue 21): each one a small, pure, backend-neutral piece of `keras.ops`
math with explicit state, which the adapters feed and the monitor records.

- `keras_gradmon.signals.noise_scale`: the gradient noise scale B_simple
  (McCandlish et al. 2018), from gradients on two batch sizes.
"""
