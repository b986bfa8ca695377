"""`KerasLogsRecorder`: the latest values of chosen tags, for Keras `logs`
(the progress bar, `History`, `CSVLogger`), as `LogValue`s: the numbers
themselves, shown readably on Keras's progress bar."""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping, Sequence

import numpy as np

from keras_gradmon.formatting import format_number

#: The format specs of Keras's `Progbar`: `.4f`, or `.4e` when the
#: magnitude is at most 1e-3.
PROGBAR_SPECS = (".4f", ".4e")


class LogValue(float):
    """A number for Keras `logs` that the progress bar shows readably.

    Keras's `Progbar` formats every number with `.4f` (`.4e` at magnitudes
    up to 1e-3): a gradient norm of 2.9e38 shows as
    `289368569907829479691683563574554263552.0000`, a count of 0 as
    `0.0000e+00`. A `LogValue` is the float itself (`History`, `CSVLogger`,
    TensorBoard and `==` get the exact number; `str` and `repr` are a
    float's) whose format under those two specs is `format_number`'s:
    `2.894e+38`, `0`, `40.73`. Any other spec formats it as a float.

    Example:

    >>> value = LogValue(2.893685699e38)
    >>> f"{value / 1:.4f}", f"{LogValue(0):.4e}", f"{value:.2e}"
    ('2.894e+38', '0', '2.89e+38')
    """

    __slots__ = ()

    def __format__(self, spec: str) -> str:
        if spec in PROGBAR_SPECS:
            return format_number(self)
        return float.__format__(self, spec)

    def __truediv__(self, other: object) -> float:
        # The progress bar shows `value / count` (count 1 for our keys).
        result = float.__truediv__(self, other)
        return result if result is NotImplemented else LogValue(result)


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
    >>> type(logs["grad_norm"]).__name__
    'LogValue'
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
        """Sets each key in `logs` to its newest value (NaN before any), as a
        `LogValue`."""
        if logs is None:
            return
        for key in self.keys:
            logs[key] = LogValue(self.latest.get(key, math.nan))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
