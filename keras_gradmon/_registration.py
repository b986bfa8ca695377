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
    "keras": "keras_gradmon.adapters.keras3",
    "tf_keras": "keras_gradmon.adapters.tf_keras",
}
_lock = threading.Lock()


def _register(library: str) -> None:
    # An incomplete install (tf_keras without its TensorFlow, say) is not
    # `import keras_gradmon`'s error: `load_model` will say what is missing.
    with contextlib.suppress(ImportError):
        importlib.import_module(_ADAPTERS[library])


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs an adapter's registration right after its library is imported."""

    def __init__(self) -> None:
        self.pending = set(_ADAPTERS)

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
    """The library's own loader, then the registration."""

    def __init__(self, loader: Any, library: str) -> None:
        self.loader = loader
        self.library = library

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        _register(self.library)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


_finder: _AfterImport | None = None


def install() -> None:
    """Registers with the libraries already imported; waits for the others."""
    global _finder
    waiting = []
    for library in _ADAPTERS:
        if library in sys.modules:
            _register(library)
        else:
            waiting.append(library)
    if waiting and _finder is None:
        _finder = _AfterImport()
        _finder.pending = set(waiting)
        sys.meta_path.insert(0, _finder)
