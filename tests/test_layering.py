"""The output layer sits below the monitors: nothing in `recorders/` (nor the
hub) imports the adapters or the alerts, and the host writer and the hub
import neither TensorFlow nor the monitor when they are imported (type
checking aside): on the JAX backend they must load without TensorFlow."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).parent.parent / "keras_gradmon"
LOWER = [*sorted(PACKAGE.glob("recorders/*.py")), PACKAGE / "hub.py"]
HOST = [PACKAGE / "recorders" / "writer.py", PACKAGE / "hub.py"]


def _imports(path: pathlib.Path, module_level: bool) -> set[str]:
    """Modules `path` imports (at module level only, if asked), leaving out
    those under `if TYPE_CHECKING`."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if module_level else list(ast.walk(tree))
    names = set()
    for node in nodes:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for inner in ast.walk(node) if not module_level else [node]:
            if isinstance(inner, ast.ImportFrom) and inner.module:
                names.add(inner.module)
                names.update(f"{inner.module}.{a.name}" for a in inner.names)
            elif isinstance(inner, ast.Import):
                names.update(a.name for a in inner.names)
    return names


def _within(names: set[str], packages: tuple[str, ...]) -> set[str]:
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in packages)}


@pytest.mark.parametrize("path", LOWER, ids=lambda p: p.name)
def test_no_upward_import_from_the_output_layer(path):
    upward = ("keras_gradmon.wrapping", "keras_gradmon.alerts")
    assert _within(_imports(path, module_level=False), upward) == set()


@pytest.mark.parametrize("path", HOST, ids=lambda p: p.name)
def test_host_writer_imports_no_tensorflow_when_imported(path):
    heavy = (
        "tensorflow",
        "keras_gradmon.backend.distribute",
        "keras_gradmon.core.monitor",
    )
    assert _within(_imports(path, module_level=True), heavy) == set()
