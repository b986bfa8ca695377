"""`Schedule`: when is step N due? The one answer, for the graph and the host.

A frequency is a positive int N (steps 0, N, 2N, ...) or a callable from the
step to a boolean. The same `Schedule` gates the statistics inside the
compiled train step (`due(step_tensor)`), tells the host callbacks after which
batches a fresh summary can exist (`any_due(first, end)`), and decides when
the activation monitor measures (`due(int)`).

`planned(...)`, while a step is traced, says what the host knows is due at
the program's one step: `measuring(False)` (`planned(False)`) that nothing
is, `planned(True)` that the statistics are and the histograms are not. The
host runs such a program only on those steps (`keras_gradmon.programs`), so
the monitor builds that measurement into it, with no conditional.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from keras_gradmon.validation import fail

#: Steps above this are rejected: the step is an int64 tensor in the graph.
MAX_STEP = 2**63 - 1
#: `any_due` evaluates a callable frequency step by step over at most this
#: many steps; a longer range is answered "may be due" without evaluating.
_CALLABLE_SCAN_LIMIT = 4096

Frequency = int | Callable[[Any], Any]

#: What the host knows is due at the one step of the program being traced:
#: None (nothing: each schedule decides in the graph), else `(scalars,
#: histograms)`.
_PLANNED: contextvars.ContextVar[tuple[bool, bool] | None] = contextvars.ContextVar(
    "keras_gradmon_planned", default=None
)


@contextlib.contextmanager
def planned(scalars: bool | None, histograms: bool = False) -> Iterator[None]:
    """Within (while a step is traced), the host knows what is due at the
    program's one step, and the traced program measures exactly that, with
    no conditional on the step: `planned(False)` measures nothing (the
    program the host runs where nothing is due), `planned(True)` the
    statistics (where they are due and the histograms are not). What the
    monitor does on every step (clipping, `skip_nonfinite`, the spike and
    noise signals) stays in. `planned(None)`: nothing known, each schedule
    decides in the graph (the default).

    Example:

    >>> with planned(True):
    ...     plan(), measures()
    ((True, False), True)
    """
    known = None if scalars is None else (bool(scalars), bool(histograms))
    token = _PLANNED.set(known)
    try:
        yield
    finally:
        _PLANNED.reset(token)


def measuring(on: bool) -> contextlib.AbstractContextManager[None]:
    """Within (while a step is traced), `measuring(False)` leaves every
    measurement out of the traced step (`planned(False)`); `measuring(True)`
    leaves each schedule to decide.

    Example:

    >>> with measuring(False):
    ...     measures()
    False
    """
    return planned(None if on else False)


def plan() -> tuple[bool, bool] | None:
    """What the host knows is due at the step being traced (`planned`):
    `(scalars, histograms)`, or None."""
    return _PLANNED.get()


def measures() -> bool:
    """Whether the step being traced may measure (see `planned`).

    Example:

    >>> measures()
    True
    """
    known = _PLANNED.get()
    return known is None or any(known)


def _positional_arity_ok(fn: Callable) -> bool:
    """Whether `fn` can be called with exactly one positional argument."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: try it
        return True
    try:
        signature.bind(0)
    except TypeError:
        return False
    return True


def check_frequency(name: str, value: object) -> Frequency:
    """Validates a frequency at construction and returns it.

    An int must be in [1, 2**63 - 1]. A callable must take one argument (the
    step) and, called on step 0, return a boolean (a Python bool or a bool
    tensor): an int result such as `step % 10` would read as "due on every
    step but the tenth", so it is refused instead of cast.

    Example:

    >>> check_frequency("every_n_steps", 10)
    10
    >>> check_frequency("every_n_steps", 0)
    Traceback (most recent call last):
    ...
    ValueError: `every_n_steps` must be a positive integer (at most 2**63 - 1) \
or a callable from the step to a boolean. Received: every_n_steps=0
    """
    requirement = (
        "must be a positive integer (at most 2**63 - 1) or a callable from "
        "the step to a boolean"
    )
    if callable(value):
        if not _positional_arity_ok(value):
            raise fail(
                name, "must be callable with exactly one argument (the step)", value
            )
        _check_callable_result(name, value)
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(name, requirement, value)
    if not 1 <= value <= MAX_STEP:
        raise fail(name, requirement, value)
    return value


def _step_tensor(step: int) -> Any:
    """`step` as an integer scalar of the Keras backend (int64 where the
    backend has it)."""
    from keras import ops

    return ops.convert_to_tensor(np.int64(step))


def _dtype_name(result: Any) -> str | None:
    dtype = getattr(result, "dtype", None)
    return None if dtype is None else str(getattr(dtype, "name", dtype))


def _check_callable_result(name: str, fn: Callable) -> None:
    try:
        result = fn(_step_tensor(0))
    except Exception as error:  # the user's function: any failure is theirs
        raise ValueError(
            f"`{name}` raised {type(error).__name__}: {error} when called with "
            f"step 0 (an integer scalar tensor). Received: {name}={fn!r}"
        ) from error
    dtype = _dtype_name(result)
    is_bool = isinstance(result, bool) or dtype == "bool"
    if not is_bool:
        raise ValueError(
            f"`{name}` must return a boolean (a bool tensor such as "
            f"`keras.ops.equal(step % 10, 0)`), not {type(result).__name__}"
            f"{f' of dtype {dtype}' if dtype is not None else ''}: an int "
            f"result would be read as 'due whenever it is not 0'. Received: "
            f"{name}={fn!r}"
        )


class Schedule:
    """When a frequency is due, asked from the graph or from the host.

    Args:
        frequency: A positive int N (due on steps 0, N, 2N, ...) or a
            callable from the step to a boolean, or None (never due).
        name: The argument name used in error messages.

    Example:

    >>> schedule = Schedule(10)
    >>> schedule.due(20), schedule.due(21)
    (True, False)
    >>> schedule.any_due(11, 20), schedule.any_due(11, 21)
    (False, True)
    """

    def __init__(self, frequency: Frequency | None, name: str = "every_n_steps"):
        self.frequency = None if frequency is None else check_frequency(name, frequency)
        self.name = name

    @property
    def never(self) -> bool:
        """Whether this schedule is never due (no frequency)."""
        return self.frequency is None

    @property
    def always(self) -> bool:
        """Whether every step is due (`frequency == 1`)."""
        return self.frequency == 1

    def due(self, step: Any) -> Any:
        """Whether `step` is due: a bool tensor for a tensor step (traced into
        the graph), a Python bool for a Python int."""
        if hasattr(step, "dtype") or hasattr(step, "value"):
            return self._graph_due(step)
        step = int(step)
        if self.frequency is None:
            return False
        if callable(self.frequency):
            # np.int64: TensorFlow caches the tensor of every Python int.
            return bool(self.frequency(_step_tensor(step)))
        return step % self.frequency == 0

    def _graph_due(self, step: Any) -> Any:
        from keras import ops

        from keras_gradmon import backend

        step = ops.cast(step, backend.step_dtype())
        if self.frequency is None:
            return ops.convert_to_tensor(False)
        if callable(self.frequency):
            result = self.frequency(step)
            dtype = _dtype_name(result) or "bool"
            if dtype != "bool":
                raise ValueError(
                    f"`{self.name}` must return a boolean tensor. Received a "
                    f"{dtype} tensor from {self.name}={self.frequency!r}"
                )
            return ops.reshape(ops.convert_to_tensor(result, "bool"), [])
        return ops.equal(ops.mod(step, self.frequency), 0)

    def gate(self, step: Any, allowed: Any = True) -> Any:
        """What gates a measurement of this schedule at the tensor `step`,
        where `allowed` (a bool tensor, or True) also holds: a bool tensor,
        or a Python bool when known while tracing (True: every step, no
        conditional needed; False: never).

        Example:

        >>> Schedule(1).gate(object()), Schedule(None).gate(object())
        (True, False)
        """
        from keras import ops

        if self.never:
            return False
        if self.always:
            return allowed
        due = self.due(step)
        return due if allowed is True else ops.logical_and(due, allowed)

    def any_due(self, first: int, end: int) -> bool:
        """Whether any step in `[first, end)` is due (host side, no device).

        Example:

        >>> Schedule(100).any_due(1, 100), Schedule(100).any_due(1, 101)
        (False, True)
        """
        if end <= first or self.frequency is None:
            return False
        if callable(self.frequency):
            if end - first > _CALLABLE_SCAN_LIMIT:
                return True
            return any(self.due(step) for step in range(first, end))
        return -(-first // self.frequency) * self.frequency < end

    def next_due(self, first: int) -> int | float:
        """The first step at or after `first` that may be due (host side):
        `first` itself for a callable frequency, which only a step's own
        test can tell; infinity for none.

        Example:

        >>> Schedule(100).next_due(101), Schedule(100).next_due(200)
        (200, 200)
        """
        if self.frequency is None:
            return math.inf
        if callable(self.frequency):
            return first
        return -(-first // self.frequency) * self.frequency

    def __repr__(self) -> str:
        return f"Schedule({self.frequency!r})"
