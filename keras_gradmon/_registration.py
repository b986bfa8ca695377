"""`import keras_gradmon` registers the wrappers with Keras and tf_keras, so
that `keras.models.load_model` (and tf_keras's) finds them, as it finds
every Keras plugin's classes, without importing TensorFlow itself.

Registration is the import of an adapter module (its class decorator
registers it). Where Keras (or tf_keras) is already imported, that happens
at once; otherwise a finder on `sys.meta_path` runs it right after Keras's
own import completes. The `keras-gradmon` command therefore starts without
TensorFlow, and a model saved with a wrapper loads after `import keras_gradmon`
in whatever order the two imports come.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import sys
import threading
from typing import Any

#: The library each adapter registers with.
_ADAPTERS = {
    "keras": "keras_gradmon.keras3",
    "tf_keras": "keras_gradmon.legacy.tf_keras",
}
#: Imports after which registration is tried: the libraries, and TensorFlow,
#: which imports tf_keras itself under TF_USE_LEGACY_KERAS=1 (registration
#: fails while TensorFlow is half-imported, and succeeds once it is done).
_TRIGGERS = frozenset({*_ADAPTERS, "tensorflow"})
_lock = threading.Lock()
_registered: set[str] = set()


def _imported(name: str, done: str | None) -> bool:
    """Whether module `name` is imported and complete (not half-way, as Keras
    is while it imports TensorFlow); `done` has just finished executing."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    initializing = getattr(spec, "_initializing", False) and name != done
    return module is not None and not initializing


def _register_loaded(done: str | None = None) -> None:
    """Registers the adapter of every library imported so far; one whose
    dependencies are still being imported is retried at the next trigger."""
    for library, adapter in _ADAPTERS.items():
        if library in _registered or not _imported(library, done):
            continue
        if library == "keras" and not _keras_backend_supported():
            continue
        # An incomplete install (or a half-imported TensorFlow) is not
        # `import keras_gradmon`'s error; `load_model` says what is missing.
        with contextlib.suppress(ImportError):
            importlib.import_module(adapter)
            _registered.add(library)


def _keras_backend_supported() -> bool:
    """Whether the imported Keras runs on a backend the Keras 3 adapter
    supports (`KERAS_BACKEND`: TensorFlow or JAX; on JAX it imports no
    TensorFlow); on another, its import would fail."""
    backend = getattr(sys.modules["keras"], "backend", None)
    try:
        return backend.backend() in ("tensorflow", "jax")
    except AttributeError:  # Keras half-imported: try at the next trigger
        return False


class _AfterImport(importlib.abc.MetaPathFinder):
    """Tries the registrations right after a trigger's import completes."""

    def __init__(self, triggers: set[str]) -> None:
        self.pending = set(triggers)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.pending:
            return None
        with _lock:
            self.pending.discard(name)  # also keeps the lookup below from recursing
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _RegisteringLoader(spec.loader, name)
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    """The library's own loader, then the registrations."""

    def __init__(self, loader: Any, name: str) -> None:
        self.loader = loader
        self.name = name

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        _register_loaded(done=self.name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


_finder: _AfterImport | None = None


def install() -> None:
    """Registers with the libraries already imported; waits for the others."""
    global _finder
    _register_loaded()
    waiting = {name for name in _TRIGGERS if name not in sys.modules}
    if waiting and _finder is None:
        _finder = _AfterImport(waiting)
        sys.meta_path.insert(0, _finder)
