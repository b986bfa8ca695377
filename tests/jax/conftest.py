"""tests/jax runs in a process of its own, with `KERAS_BACKEND=jax` (see the
Makefile); the main TensorFlow process collects nothing here."""

import os

if os.environ.get("KERAS_BACKEND") != "jax":
    collect_ignore_glob = ["*.py"]
