"""The docstring examples of a module, run as a test."""

from __future__ import annotations

import doctest
import importlib


def assert_examples_hold(module: str) -> None:
    """Runs the examples in `module`'s docstrings: at least one, none
    failing."""
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0
    assert result.attempted > 0
