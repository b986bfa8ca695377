"""`JsonlRecorder`: every write as one JSON line, for scripts and notebooks."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import IO

import numpy as np

from keras_gradmon.recorders.tensorboard import check_log_dir


def _number(value: float) -> float | str:
    # JSON has no NaN/Inf: written as the strings "NaN", "Infinity".
    value = float(value)
    return value if math.isfinite(value) else json.dumps(value)


class JsonlRecorder:
    """Appends one JSON object per write to a file:
    `{"step": 100, "scalars": {"grad_norm/global": 0.81, ...}}`,
    `{"step": 100, "histograms": {tag: [[left, right, count], ...]}}` (when
    `histograms=True`) and `{"step": 100, "tag": ..., "text": [...]}`.

    Args:
        path: The file (created with its directory; appended to).
        histograms: Also write histograms (large: k rows per tag).

    Example:

    >>> recorder = JsonlRecorder("/tmp/run/scalars.jsonl")
    >>> recorder.write_scalars({"grad_norm/global": 0.5}, step=0)
    >>> recorder.close()
    """

    def __init__(self, path: str | os.PathLike, histograms: bool = False) -> None:
        self.path = check_log_dir("path", path)
        if not isinstance(histograms, bool):
            raise ValueError(
                f"`histograms` must be a bool. Received: histograms={histograms!r}"
            )
        self.histograms = histograms
        self._file: IO[str] | None = None

    @property
    def destination(self) -> str:
        return os.path.realpath(self.path)

    def _write(self, record: dict) -> None:
        if self._file is None:
            directory = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(directory, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._file.write(json.dumps(record) + "\n")

    def write_scalars(self, values: Mapping[str, float], step: int) -> None:
        scalars = {tag: _number(v) for tag, v in values.items()}
        self._write({"step": int(step), "scalars": scalars})

    def write_histograms(self, histograms: Mapping[str, np.ndarray], step: int) -> None:
        if self.histograms and histograms:
            rows = {tag: np.asarray(h).tolist() for tag, h in histograms.items()}
            self._write({"step": int(step), "histograms": rows})

    def write_text(self, tag: str, lines: Sequence[str], step: int) -> None:
        self._write({"step": int(step), "tag": tag, "text": list(lines)})

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
