"""Thin Keras callbacks around the recorders."""

from keras_gradmon.callbacks.alerts import GradientAlertCallback
from keras_gradmon.callbacks.summary import GradientSummaryCallback

__all__ = ["GradientAlertCallback", "GradientSummaryCallback"]
