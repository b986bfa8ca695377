"""`KerasLogsRecorder`: the latest values of chosen tags, for Keras `logs`
(the progress bar, `History`, `CSVLogger`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping, Sequence

import numpy as np


class KerasLogsRecorder:
    """Keeps the newest value of each chosen tag and puts it into `logs`.

    Args:
        keys: `{logs key: tag}`, e.g. `{"grad_norm": "grad_norm/global"}`.

    Example:

    >>> recorder = KerasLogsRecorder({"grad_norm": "grad_norm/global"})
    >>> recorder.write_scalars({"grad_norm/global": 0.5}, step=10)
    >>> logs = {}
    >>> recorder.update(logs)
    >>> logs
    {'grad_norm': 0.5}
    """

    destination = None  # in-process: nothing to collide with
    #: Written on the capturing thread, with the newest summary, so that
    #: `logs` hold the value of the batch that recorded it.
    immediate = True

    def __init__(self, keys: Mapping[str, str]) -> None:
        self.keys = dict(keys)
        self.latest: dict[str, float] = {}

    def write_scalars(self, values: Mapping[str, float], step: int) -> None:
        del step  # logs carry the newest value only
        for key, tag in self.keys.items():
            if tag in values:
                self.latest[key] = float(values[tag])

    def write_histograms(self, histograms: Mapping[str, np.ndarray], step: int) -> None:
        del histograms, step  # logs hold scalars

    def write_text(self, tag: str, lines: Sequence[str], step: int) -> None:
        del tag, lines, step

    def update(self, logs: MutableMapping[str, float] | None) -> None:
        """Sets each key in `logs` to its newest value (NaN before any)."""
        if logs is None:
            return
        for key in self.keys:
            logs[key] = self.latest.get(key, math.nan)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
