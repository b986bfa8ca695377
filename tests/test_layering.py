"""The house: no import circle (type-only imports and imports inside
functions included), and imports that flow one way through the rooms, from
the step kernel to what reads its numbers: a module imports only from its
own room or a room listed before it. The host writer and the hub load
without TensorFlow (on the JAX backend they must)."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).parent.parent / "keras_gradmon"

#: The rooms, in the order imports may flow (a module may import from its
#: own room and the rooms before it).
ROOMS = (
    ("foundation", ("validation", "defaults", "formatting", "naming", "columns",
                    "histogram_rows",
                    "schedule", "backend")),
    ("kernel", ("core",)),
    ("publishing", ("hub", "writer", "claims")),
    ("output", ("recorders",)),
    ("wrappers", ("wrapping", "keras3", "legacy", "programs")),
    ("alerts", ("alerts",)),
    ("monitors", ("activations", "rl", "callbacks", "integrations", "watching",
                  "_registration", "")),
    ("report", ("report", "cli", "demo")),
    ("dashboard", ("dashboard",)),
)  # fmt: skip


def _name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _room(module: str) -> int:
    head = module.split(".")[0]
    for rank, (_, tops) in enumerate(ROOMS):
        if head in tops:
            return rank
    raise AssertionError(f"keras_gradmon.{module} is in no room of ROOMS")


def _imports(module: str, module_level: bool = False) -> set[str]:
    """The keras_gradmon modules `module` imports (anywhere in it, type-only
    included; with `module_level`, only its top-level statements outside
    `if TYPE_CHECKING`)."""
    tree = ast.parse(MODULES[module].read_text())
    nodes = ast.walk(tree)
    if module_level:
        nodes = [n for n in tree.body if not isinstance(n, ast.If)]
    found = set()
    for node in nodes:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] != "keras_gradmon":
                found.add(f"<{name.split('.')[0]}>")
                continue
            target = name.removeprefix("keras_gradmon").lstrip(".")
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target != module and not module.startswith(f"{target}."):
                found.add(target)
    return found


def test_every_module_is_in_a_room():
    for module in MODULES:
        _room(module)


@pytest.mark.parametrize("module", sorted(MODULES), ids=lambda m: m or "__init__")
def test_imports_flow_one_way_through_the_rooms(module):
    upward = [
        target
        for target in _imports(module)
        if not target.startswith("<") and _room(target) > _room(module)
    ]
    assert upward == [], f"keras_gradmon.{module} imports from a later room"


def test_no_import_circle():
    graph = {
        m: {t for t in _imports(m) if not t.startswith("<")} for m in MODULES
    }
    seen, done, circles = set(), set(), []

    def visit(module, path):
        seen.add(module)
        for target in graph[module]:
            if target in path:
                circles.append([*path[path.index(target) :], target])
            elif target not in done:
                visit(target, [*path, target])
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    assert circles == []


@pytest.mark.parametrize("module", ["writer", "hub", "claims"])
def test_host_writer_imports_no_tensorflow_when_imported(module):
    heavy = {"<tensorflow>", "<keras>", "<jax>", "core", "backend.distribute"}
    imported = _imports(module, module_level=True)
    assert imported & heavy == set()
