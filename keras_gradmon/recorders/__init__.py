"""Recorders: write what the monitor's state holds. They never compute
statistics; they turn snapshots into TensorBoard events or Keras logs."""

from keras_gradmon.recorders.tensorboard import TensorBoardRecorder

__all__ = ["TensorBoardRecorder"]
