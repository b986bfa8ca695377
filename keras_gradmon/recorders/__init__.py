"""Recorders: write what monitors publish to a `keras_gradmon.hub.Hub`.
They never compute statistics; they turn `{tag: value}` snapshots into
TensorBoard events, Keras logs, JSON Lines or console lines. Nothing here
imports the monitors, adapters or alerts above them."""

from keras_gradmon.recorders.tensorboard import TensorBoardRecorder

__all__ = ["TensorBoardRecorder"]
