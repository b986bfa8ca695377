"""`ConsoleRecorder`: one readable line per summary, on a stream; and
`progress_safe_logging`: log lines that start on a line of their own while
Keras's progress bar holds the console's line."""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any

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
        stream = self.stream or sys.stdout
        end_open_line(stream)
        print(line, file=stream)

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


class LineTrackingStream:
    """A text stream that knows whether its output stopped inside a line.

    Keras's progress bar writes `"\\r<bar>"` without a newline and holds the
    line until the epoch ends: a log line printed meanwhile starts in the
    middle of the bar. With standard output wrapped in this,
    `end_open_line` finishes the bar's line first. Everything else is the
    wrapped stream's (`isatty`, `encoding`, `fileno`, ...).

    Args:
        stream: The stream to write to (usually `sys.stdout`).

    Example:

    >>> import io
    >>> out = LineTrackingStream(io.StringIO())
    >>> _ = out.write("\\r 3/56 [===>   ]")
    >>> out.line_open
    True
    >>> end_open_line(out); out.getvalue()
    '\\r 3/56 [===>   ]\\n'
    """

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        #: Whether the last text written did not end with a newline.
        self.line_open = False

    def write(self, text: str) -> int:
        if text:
            self.line_open = not text.endswith("\n")
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def end_open_line(stream: Any) -> None:
    """Ends the line `stream` is inside of (a `LineTrackingStream` whose last
    write did not end a line) with a newline, and flushes; else nothing."""
    if isinstance(stream, LineTrackingStream) and stream.line_open:
        stream.write("\n")
        stream.flush()


class LineEndingHandler(logging.Handler):
    """Writes each log record (its message alone, as Python's last-resort
    handler does) to `stream` (default: standard error at emit time), after
    ending the line that standard output is inside of."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        super().__init__()
        self.stream = stream
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            end_open_line(sys.stdout)
            stream = self.stream or sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # logging must not raise
            self.handleError(record)


@contextlib.contextmanager
def progress_safe_logging(
    logger: str = "keras_gradmon", stream: IO[str] | None = None
) -> Iterator[LineTrackingStream]:
    """Within it, the lines of `logger` start on a line of their own even
    while a progress bar holds the console's line.

    Wraps `sys.stdout` in a `LineTrackingStream` and gives `logger` a
    `LineEndingHandler` (writing to `stream`, default standard error) in
    place of its propagation to the root logger; restores both on exit.
    Nested uses keep the outer one.

    Example:

    ```python
    with progress_safe_logging():
        model.fit(x, y, callbacks=[keras_gradmon.GradientMonitorCallback()])
    ```
    """
    if isinstance(sys.stdout, LineTrackingStream):
        yield sys.stdout
        return
    log = logging.getLogger(logger)
    saved, propagate = sys.stdout, log.propagate
    handler = LineEndingHandler(stream)
    tracked = LineTrackingStream(saved)
    sys.stdout, log.propagate = tracked, False
    log.addHandler(handler)
    try:
        yield tracked
    finally:
        log.removeHandler(handler)
        log.propagate = propagate
        if sys.stdout is tracked:
            sys.stdout = saved
