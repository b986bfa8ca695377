"""The docstring examples of the modules issue 29's section 3 ("a
newcomer's first five minutes") touched."""

from __future__ import annotations

import pytest

from tests.doctests import assert_examples_hold


@pytest.mark.parametrize(
    "module",
    [
        "keras_gradmon.cli",
        "keras_gradmon.demo",
        "keras_gradmon.recorders.console",
        "keras_gradmon.recorders.keras_logs",
        "keras_gradmon.report.analysis",
    ],
)
def test_docstring_examples_hold(module):
    assert_examples_hold(module)
