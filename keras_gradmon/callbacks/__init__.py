"""Thin Keras callbacks around the recorders."""

from keras_gradmon.callbacks.summary import GradientSummaryCallback

__all__ = ["GradientSummaryCallback"]
