"""`Recorder`: what every destination of the numbers implements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Recorder(Protocol):
    """A destination for recorded numbers (TensorBoard, Keras logs, JSON
    Lines, the console). Recorders never compute statistics: they write
    what they are given, at the step they are given.

    `destination` names where the numbers land (a directory, a file, an
    object), so that two monitors writing the same tags to one place are
    refused; None where nothing can collide (the console).

    Example:

    >>> class Printer:
    ...     destination = None
    ...     def write_scalars(self, values, step): print(step, values)
    ...     def write_histograms(self, histograms, step): pass
    ...     def write_text(self, tag, lines, step): pass
    ...     def flush(self): pass
    ...     def close(self): pass
    >>> isinstance(Printer(), Recorder)
    True
    """

    destination: Any

    def write_scalars(self, values: Mapping[str, float], step: int) -> None:
        """Writes each `{tag: value}` at `step`."""
        ...

    def write_histograms(self, histograms: Mapping[str, np.ndarray], step: int) -> None:
        """Writes each `{tag: [k, 3] (left, right, count) rows}` at `step`."""
        ...

    def write_text(self, tag: str, lines: Sequence[str], step: int) -> None:
        """Writes `lines` as one text entry under `tag` at `step`."""
        ...

    def flush(self) -> None:
        """Makes everything written so far visible to readers."""
        ...

    def close(self) -> None:
        """Flushes and releases the destination (after training ends)."""
        ...
