"""Programs of one Keras train function, chosen on the host.

A monitored step that records nothing still runs the monitor's conditional,
and its untaken branch is not free: it holds the weights the optimizer
updates in place (on JAX, XLA copies every donated weight for it; under
XLA on TensorFlow, the update ratio's weights before the update are zeros
written every step). Its taken branch is dearer than the same measurement
outside a conditional (about twice, on the benchmark MLP, TensorFlow and
JAX alike: XLA keeps a conditional's operands whole and fuses nothing
across it). Like Levanter, which compiles a second train step without its
hooks, `fit` here runs up to three programs of its train function:

- the *measuring* one: the step as compiled today, the monitor's
  conditional inside, deciding in the graph which steps record;
- the *idle* one: the same step traced under `schedule.measuring(False)`,
  with no measurement in it: at the defaults, the unwrapped step, op for
  op (what the monitor does every step, such as clipping, stays);
- the *due* one: the step traced under `schedule.planned(True)`, measuring
  the statistics with no conditional on the step, for a call of one step
  that the host knows has its statistics due and its histograms not.

On JAX the idle and due programs also leave out the state arrays their step
passes through untouched (`backend.jax.LeanStep`): Keras's trainer hands
every optimizer variable to each call, and each costs the call about 0.9 us.

`GradientMonitorCallback` tells `Programs` before each call, from its
host-side step count (`callbacks.StepTracker`), whether any step of that
call can be due, and whether it knows it is (`plan`); the measuring program
runs where a step may be due and the host cannot tell for sure (a `fit`'s
first call, histograms, several steps a call, a summary not found yet). A
call nobody planned for (`train_on_batch`, a `fit` without the callback)
runs the measuring program, so nothing is ever missed for want of a plan.
Each program is traced (and compiled) on its first call: a `fit` whose every
step is due never builds the idle one.

The idle and due programs are compiles of their own, of about the plain
step's and the measuring step's size, which only a long run pays back.
So, like a tiered JIT, the measuring program runs every call until the run
has lasted, after its first call, as long as that first call took (its
trace and compile: `Programs.patience` times it): a run shorter than its
compile never compiles the others. Then, where JAX computes on an
accelerator, they are compiled on a thread of their own
(`backend.compile_aside`), for the shapes of the first call, while the
measuring program goes on running the steps; the host switches when both
are ready. The training thread never stops for their compile: only a
measuring call that comes while the thread traces waits for the trace
(Keras's Python and the monitor's, which a call for new shapes would run
too), not for XLA. On JAX's CPU and on TensorFlow each is traced and
compiled at its first call, on the training thread
(`Programs.compile_aside_on_cpu`).

Example:

```python
programs = Programs.install(model)     # after make_train_function()
programs.plan(due=False)               # the next call records nothing
logs = model.train_function(iterator)  # runs the idle program
```
"""

from __future__ import annotations

import time
from typing import Any

import keras

from keras_gradmon import backend
from keras_gradmon.schedule import planned

#: Where a model keeps the programs made for it (in its `__dict__`, out of
#: Keras's tracking), so that a second `fit` does not trace them again. On
#: the model, not in a weak-keyed table: the programs refer to the model,
#: and such a table would keep it, and its optimizer, alive for ever.
_ATTRIBUTE = "_keras_gradmon_programs"


class Programs:
    """`model.train_function` as up to three programs: the measuring one
    unless a plan says the next call has nothing due (idle), or exactly
    its statistics (due).

    Args:
        measuring: The train function as Keras made it (it measures).
        idle: A second train function made the same way, called (and so
            traced) under `measuring(False)`.
        due: A third, called under `planned(True)`; None: none (the
            measuring program runs instead).

    Example:

    >>> programs = Programs(measured_fn, idle_fn)  # doctest: +SKIP
    >>> programs.plan(due=False); programs(iterator)  # doctest: +SKIP
    """

    #: How long the measuring program runs every call before the others
    #: may, in multiples of the first call's time (0: from the second call,
    #: each compiled at its first call, on the training thread).
    patience: float = 1.0
    #: Whether the idle and due programs compile on a thread of their own
    #: (`backend.compile_aside`) where JAX computes on the CPU. Off: there
    #: the thread takes cores from the steps, which the measuring program
    #: runs until it is done, and the whole fit took about as long (the
    #: benchmark MLP and ResNet50V2 on 2 cores); on an accelerator the
    #: host's cores are free while the device computes.
    compile_aside_on_cpu: bool = False

    def __init__(self, measuring: Any, idle: Any, due: Any = None) -> None:
        self.measuring = measuring
        self.idle = idle
        self.due = due
        #: Compiles the idle and due programs off the training thread
        #: (`backend.compile_aside`; None: each at its first call).
        self.aside = backend.compile_aside(
            [f for f in (idle, due) if f is not None], self.compile_aside_on_cpu
        )
        #: How many calls each program ran.
        self.calls = {"idle": 0, "measuring": 0, "due": 0}
        #: From when (`time.monotonic()`) the idle and due programs may run:
        #: None before the first call.
        self.idle_from: float | None = None
        self._plans: list[tuple[bool, bool]] = []

    def plan(self, due: bool, known: bool = False) -> None:
        """Says whether a step of the next call can be due, and, with
        `known`, that the call is one step whose statistics are due and
        whose histograms are not. Several plans for one call (several
        callbacks) combine: idle if none is due, due if every one that is
        due is known."""
        self._plans.append((bool(due), bool(due) and bool(known)))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        plans, self._plans = self._plans, []
        if plans and self._idle_ready():
            # Each traces its step under its own `planned` (`_function`).
            if not any(due for due, _ in plans):
                self.calls["idle"] += 1
                return self.idle(*args, **kwargs)
            if self.due is not None and all(known for due, known in plans if due):
                self.calls["due"] += 1
                return self.due(*args, **kwargs)
        self.calls["measuring"] += 1
        if self.idle_from is not None:
            if self.aside is None:
                return self.measuring(*args, **kwargs)
            with self.aside.tracing:  # not while the thread traces
                return self.measuring(*args, **kwargs)
        if self.aside is not None and self.patience > 0:
            args = self.aside.watch(args)  # the shapes to compile the others for
        start = time.monotonic()
        result = self.measuring(*args, **kwargs)
        now = time.monotonic()
        self.idle_from = now + self.patience * (now - start)
        return result

    def _idle_ready(self) -> bool:
        """Whether the run has lasted long enough for the idle program, and
        it is compiled where it is compiled aside."""
        if self.idle_from is None or time.monotonic() < self.idle_from:
            return False
        return self.aside is None or self.aside.ready()

    @classmethod
    def install(cls, model: Any) -> Programs:
        """Makes `model.train_function` (made by Keras's
        `make_train_function`) the two programs; the same ones again for a
        later `fit` of the same compiled model."""
        current = model.train_function
        if isinstance(current, Programs):
            return current
        made = cls.made_for(model)
        if made is None or made.measuring is not current:
            made = cls(current, _function(model, False), _function(model, True))
            model.__dict__[_ATTRIBUTE] = made
        model.train_function = made
        return made

    @staticmethod
    def made_for(model: Any) -> Programs | None:
        """The programs last installed on `model`, or None.

        Example:

        >>> Programs.made_for(model).calls  # doctest: +SKIP
        {'idle': 12, 'measuring': 8}
        """
        return model.__dict__.get(_ATTRIBUTE)

    @classmethod
    def for_fit(cls, model: Any, optimizer: Any) -> Programs | None:
        """`install`ed on `model` where the host can tell its due steps:
        `optimizer` is `model`'s Keras 3 `GradientMonitorOptimizer` and its
        step count advances by one each step (no step skipped, no gradient
        accumulation, one replica); else None (one program, as compiled).

        Example:

        >>> Programs.for_fit(model, model.optimizer)  # doctest: +SKIP
        """
        from keras_gradmon.keras3 import GradientMonitorOptimizer

        if not isinstance(optimizer, GradientMonitorOptimizer):
            return None
        strategy = getattr(model, "distribute_strategy", None)
        replicas = getattr(strategy, "num_replicas_in_sync", 1)
        if model.optimizer is not optimizer or replicas != 1:
            return None
        if not optimizer.counts_every_step or model.train_function is None:
            return None
        return cls.install(model)

    @staticmethod
    def uninstall(model: Any) -> None:
        """Gives `model` back its measuring train function (after `fit`: a
        later `train_on_batch` or `fit` without the callback measures)."""
        current = getattr(model, "train_function", None)
        if isinstance(current, Programs):
            model.train_function = current.measuring


def build_before_tracing(model: Any, optimizer: Any) -> bool:
    """Builds `optimizer` on `model`'s trainable variables before Keras first
    traces the train function, where Keras would build it inside that trace:
    on TensorFlow without a distribution strategy (Keras's
    `_maybe_symbolic_build` defers the build there). A `tf.function` whose
    first trace makes variables is traced a second time, the monitor's
    measurement with it (on ResNet50V2, about 2 s of tracing more, twice).
    This is the build Keras itself makes under a strategy (`_symbolic_build`),
    and it is only made where `optimizer` is `model`'s unbuilt Keras 3
    `GradientMonitorOptimizer` and every layer is built (else the variables
    are not all known yet). Returns whether it built it.

    Example:

    >>> build_before_tracing(model, model.optimizer)  # doctest: +SKIP
    True
    """
    from keras_gradmon.keras3 import GradientMonitorOptimizer

    if keras.backend.backend() != "tensorflow":
        return False
    if not isinstance(optimizer, GradientMonitorOptimizer) or optimizer.built:
        return False
    layers = getattr(model, "_flatten_layers", None)
    if model.optimizer is not optimizer or layers is None:
        return False
    variables = model.trainable_variables
    if not variables or not all(layer.built for layer in layers()):
        return False
    with model.distribute_strategy.scope():
        optimizer.build(variables)
    return True


def _function(model: Any, scalars: bool) -> Any:
    """Another train function of `model`, made by Keras from a train step of
    its own traced under `planned(scalars)`: JAX keys its trace cache on the
    function, and two `jit`s of one bound `train_step` would share the
    measuring trace."""
    train_step = model.train_step

    def planned_step(*args: Any, **kwargs: Any) -> Any:
        with planned(scalars):
            return train_step(*args, **kwargs)

    # On JAX, without the state arrays the step passes through untouched:
    # all of the monitor's in the idle program, the histograms' in the due.
    lean = backend.lean_train_function(model, planned_step)
    if lean is not None:
        return lean
    own = model.__dict__.get("train_step", _NONE)
    model.__dict__["train_step"] = planned_step  # read by make_train_function
    try:
        model.make_train_function(force=True)
    finally:
        if own is _NONE:
            del model.__dict__["train_step"]
        else:
            model.__dict__["train_step"] = own
    return model.train_function


_NONE = object()


__all__ = ["Programs", "build_before_tracing"]
