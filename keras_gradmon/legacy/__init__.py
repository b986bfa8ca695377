"""The wrappers of TensorFlow's older optimizer frameworks, as tf-agents uses
them: tf_keras optimizers (`legacy.tf_keras`, under `TF_USE_LEGACY_KERAS=1`)
and `tf.compat.v1.train` optimizers (`legacy.tf_v1`), both recording against
a step variable of the caller's (`legacy.stepped`), and the in-graph writing
of their statistics under a default `tf.summary` writer
(`legacy.graph_writer`). Each imports TensorFlow; nothing here is imported
on the JAX backend. `keras_gradmon.wrap` picks the wrapper of an optimizer's
kind."""
