"""Helpers for libraries built on TensorFlow (tf-agents)."""
