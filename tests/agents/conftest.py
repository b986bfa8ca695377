"""tf-agents tests: they need tf_keras, selected before TensorFlow is imported.

`TF_USE_LEGACY_KERAS=1` is set here when TensorFlow is not imported yet; if
it already is (without the variable), every test in this directory is
reported as skipped, with the reason, instead of being imported.
"""

import os
import sys
from importlib.util import find_spec

import pytest

SKIP_REASON = None
if "tensorflow" in sys.modules and os.environ.get("TF_USE_LEGACY_KERAS") != "1":
    SKIP_REASON = (
        "tests/agents need TF_USE_LEGACY_KERAS=1 before TensorFlow is imported "
        "(tf-agents uses tf_keras), and TensorFlow was already imported without "
        "it. Run: TF_USE_LEGACY_KERAS=1 python -m pytest tests/agents"
    )
elif find_spec("tf_agents") is None or find_spec("tf_keras") is None:
    SKIP_REASON = "tests/agents need tf-agents and tf_keras, not installed"
else:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class _Skipped(pytest.Item):
    def runtest(self) -> None:
        pytest.skip(SKIP_REASON)


class _SkippedModule(pytest.File):
    def collect(self):
        yield _Skipped.from_parent(self, name="tf_agents_tests")


if SKIP_REASON is not None:

    def pytest_pycollect_makemodule(module_path, parent):
        # Replaces each test module (never imported) by one skipped item.
        return _SkippedModule.from_parent(parent, path=module_path)
