"""`ConsoleRecorder`: one readable line per summary, on a stream."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import IO

import numpy as np

from keras_gradmon.formatting import format_number

#: By default: the step-wide numbers (global norms, clipping, skips).
DEFAULT_TAGS = r"(^|/)global$|^clip/|^skipped/|^loss_scale/"


class ConsoleRecorder:
    """Prints `step 100: grad_norm/global=0.81 clip/fraction=0 ...`.

    Args:
        tags: A regex on the tags to print (default: the step-wide ones).
        stream: Where to print (default: standard output at print time).

    Example:

    >>> ConsoleRecorder().write_scalars({"grad_norm/global": 0.5}, step=3)
    step 3: grad_norm/global=0.5
    """

    destination = None  # a stream: nothing to collide with

    def __init__(self, tags: str = DEFAULT_TAGS, stream: IO[str] | None = None):
        if not isinstance(tags, str):
            raise ValueError(f"`tags` must be a regex string. Received: tags={tags!r}")
        try:
            self._tags = re.compile(tags)
        except re.error as error:
            raise ValueError(
                f"`tags` is not a valid regular expression ({error}). "
                f"Received: tags={tags!r}"
            ) from None
        self.stream = stream

    def _print(self, line: str) -> None:
        print(line, file=self.stream or sys.stdout)

    def write_scalars(self, values: Mapping[str, float], step: int) -> None:
        shown = [
            f"{t}={format_number(v)}" for t, v in values.items() if self._tags.search(t)
        ]
        if shown:
            self._print(f"step {int(step)}: " + " ".join(shown))

    def write_histograms(self, histograms: Mapping[str, np.ndarray], step: int) -> None:
        del histograms, step  # not readable as text

    def write_text(self, tag: str, lines: Sequence[str], step: int) -> None:
        for line in lines:
            self._print(f"step {int(step)} {tag}: {line}")

    def flush(self) -> None:
        (self.stream or sys.stdout).flush()

    def close(self) -> None:
        self.flush()
