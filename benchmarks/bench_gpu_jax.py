"""Overhead of keras_gradmon on a GPU: Keras 3 on JAX, decoder transformers.

Issue 31's GPU figure: a GPT-style causal language model (learned position
embeddings, pre-norm blocks of causal multi-head attention and a 4x GELU
MLP, an untied output layer) of about 25M and of about 100M parameters,
trained with `model.fit` under Keras's `mixed_bfloat16` policy (float32
weights, gradients and optimizer), on random tokens. Variants, interleaved:

  A         plain `model.fit`, AdamW(1e-4): the baseline.
  defaults  `GradientMonitorOptimizer` at its defaults (statistics every
            100 steps, histograms every 1,000, update ratios) and
            `GradientMonitorCallback`.                  Target <= 1.01x.
  B         statistics every step (no histograms) and the callback.
                                                        Target <= 1.05x.

A variant named `NAME@N` (`B@256`) is NAME with every program's statistics
reducing each tensor of at least 1/N of the elements where it lies, unmasked
(`unpacking`): an experiment for the GPU, where packing's copies and
concatenations are slow.

`first fit` is each variant's first `fit` of one batch (its trace and
compile and one step) on the model that is then timed; the timed epochs
begin once the idle and due programs have been compiled too. `memory`
compiles each model's train step as Keras's trainer jits it
(`donate_argnums=0`) unwrapped, wrapped (the measuring program), wrapped
under `planned(False)` (the idle one) and under `planned(True)` (the due
one) (`--memory`: which of them, `@N` as above), and reports XLA's own
accounting of each program's device memory
(`Compiled.memory_analysis()`): arguments, outputs, the donated bytes they
share, and temporaries. A weight-sized buffer more than the unwrapped step
would show there as temporaries.

    python benchmarks/bench_gpu_jax.py                 # both sizes
    python benchmarks/bench_gpu_jax.py --sizes 25M --variants A,B,B@256
    python benchmarks/bench_gpu_jax.py --sizes tiny --steps 8 --reps 2  # CPU smoke
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import argparse
import contextlib
import json
import platform
import tempfile
import time
from collections.abc import Iterator

import jax
import keras
import numpy as np
from _timing import format_table, interleaved_times, summarize

import keras_gradmon
from keras_gradmon import GradientMonitorCallback, GradientMonitorOptimizer
from keras_gradmon.schedule import planned

#: name: (vocabulary, sequence, width, blocks, heads, batch)
SIZES = {
    "tiny": (512, 32, 64, 2, 4, 8),
    "25M": (8192, 256, 512, 5, 8, 32),
    "100M": (8192, 256, 768, 12, 12, 16),
}
VARIANTS = {
    "A": None,
    "defaults": {},
    "B": {"every_n_steps": 1, "histogram_every_n_steps": None},
}
TARGETS = {"defaults": 1.01, "B": 1.05}
#: memory's programs: name: (options, what the host plans)
PROGRAMS = {
    "unwrapped": (None, None),
    "measuring": ({}, None),
    "idle": ({}, False),
    "due": ({}, True),
}


def variant(name: str, table: dict) -> tuple:
    """The entry of `table` for `name` (`NAME@N`: NAME's), and its N or None."""
    base, _, alone = name.partition("@")
    return table[base], (int(alone) if alone else None)


@contextlib.contextmanager
def unpacking(alone: int | None) -> Iterator[None]:
    """Within (while programs are traced), with `alone` N: the statistics of
    every program reduce each tensor of at least 1/N of all the elements
    where it lies, without a mask unless an element is not finite. The
    library does so only where every step measures, with N 32
    (`core.batched.layout_groups`, `backend.unmasked_pays`)."""
    if alone is None:
        yield
        return
    from keras_gradmon.backend import jax as jax_backend
    from keras_gradmon.core import batched

    saved = batched._ALONE, jax_backend.unmasked_pays
    batched._ALONE, jax_backend.unmasked_pays = alone, lambda every_step: True
    try:
        yield
    finally:
        batched._ALONE, jax_backend.unmasked_pays = saved


class PositionEmbedding(keras.layers.Layer):
    """Adds a learned embedding of each position to its token's."""

    def build(self, input_shape):
        self.table = self.add_weight(
            shape=tuple(input_shape[1:]), initializer="random_normal", name="table"
        )

    def call(self, inputs):
        return inputs + keras.ops.cast(self.table, inputs.dtype)


def decoder(vocab: int, sequence: int, width: int, blocks: int, heads: int):
    """A pre-norm causal decoder: next-token logits for each position."""
    tokens = keras.Input((sequence,), dtype="int32")
    h = PositionEmbedding()(keras.layers.Embedding(vocab, width)(tokens))
    for _ in range(blocks):
        a = keras.layers.LayerNormalization()(h)
        a = keras.layers.MultiHeadAttention(heads, width // heads)(
            a, a, use_causal_mask=True
        )
        h = h + a
        f = keras.layers.LayerNormalization()(h)
        f = keras.layers.Dense(4 * width, activation="gelu")(f)
        h = h + keras.layers.Dense(width)(f)
    h = keras.layers.LayerNormalization()(h)
    logits = keras.layers.Dense(vocab, dtype="float32")(h)
    return keras.Model(tokens, logits)


def build(size: str, options: dict | None) -> keras.Model:
    vocab, sequence, width, blocks, heads, _ = SIZES[size]
    keras.utils.set_random_seed(0)
    model = decoder(vocab, sequence, width, blocks, heads)
    optimizer = keras.optimizers.AdamW(1e-4)
    if options is not None:
        optimizer = GradientMonitorOptimizer(optimizer, **options)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=True)
    return model


def data(size: str, steps: int) -> tuple[np.ndarray, np.ndarray]:
    vocab, sequence, *_, batch = SIZES[size]
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, vocab, (steps * batch, sequence + 1), dtype=np.int32)
    return tokens[:, :-1], tokens[:, 1:]


def time_size(
    size: str, variants: list[str], steps: int, reps: int, log_root: str
) -> list[dict]:
    """Interleaved epochs of `variants`; the first fits beside them."""
    batch = SIZES[size][-1]
    x, y = data(size, steps)
    units, first = {}, {}
    for name in variants:
        options, alone = variant(name, VARIANTS)
        model = build(size, options)
        log_dir = os.path.join(log_root, size, name.replace("@", "_"))
        callbacks = [] if options is None else [GradientMonitorCallback(log_dir)]

        def fit(model=model, callbacks=callbacks, n=None, alone=alone) -> None:
            with unpacking(alone):
                model.fit(
                    x[:n], y[:n], batch_size=batch, verbose=0, callbacks=callbacks
                )

        start = time.perf_counter()
        fit(n=batch)
        first[name] = time.perf_counter() - start
        settle(model, fit)
        units[name] = fit
        print(f"{size} {name}: first fit {first[name]:.1f} s", flush=True)
    cpu: dict = {}
    targets = {name: TARGETS.get(name.partition("@")[0]) for name in variants}
    targets = {name: target for name, target in targets.items() if target}
    rows = summarize(interleaved_times(units, reps, cpu), "A", targets, cpu)
    for row in rows:
        row["model"] = f"{size} ({count_parameters(size) / 1e6:.1f}M)"
        row["first_fit"] = first[row["name"]]
        row["first_fit_ratio"] = first[row["name"]] / first["A"]
    return rows


def settle(model: keras.Model, fit) -> None:
    """Fits until the due program has run (and the idle one, in a run that
    has idle steps), then once more: the timed epochs compile nothing.
    `Programs.patience` is 0 here (they may run from the second call; a run
    waits as long as its first call took, which costs device time this
    benchmark does not have)."""
    from keras_gradmon.programs import Programs

    programs = Programs.made_for(model)
    if programs is not None:
        programs.patience = 0.0
        programs.idle_from = time.monotonic()
    for _ in range(6):
        fit()
        if programs is None or programs.calls["due"]:
            break
    fit()


_COUNTS: dict[str, int] = {}


def count_parameters(size: str) -> int:
    if size not in _COUNTS:
        _COUNTS[size] = build(size, None).count_params()
    return _COUNTS[size]


def memory(size: str, programs: list[str]) -> dict[str, dict[str, int]]:
    """XLA's device-memory accounting of each train-step program."""
    x, y = data(size, 1)
    report = {}
    for name in programs:
        (options, plan), alone = variant(name, PROGRAMS)
        model = build(size, options)
        model.fit(x, y, batch_size=len(x), verbose=0)  # builds every variable
        state = model._get_jax_state(
            trainable_variables=True, non_trainable_variables=True,
            optimizer_variables=True, metrics_variables=True,
        )  # fmt: skip
        with planned(plan), unpacking(alone):
            step = jax.jit(lambda *a, m=model: m.train_step(*a), donate_argnums=0)
            analysis = step.lower(state, (x, y)).compile().memory_analysis()
        report[name] = {
            key: int(getattr(analysis, f"{key}_size_in_bytes"))
            for key in ("argument", "output", "alias", "temp")
        }
        print(f"{size} memory {name}: {report[name]}", flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="25M,100M")
    parser.add_argument("--variants", default="A,defaults,B", help="A first")
    parser.add_argument("--memory", default=",".join(PROGRAMS), help="programs")
    parser.add_argument("--steps", type=int, default=256, help="steps an epoch")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--batch", type=int, help="instead of each size's own")
    parser.add_argument("--json", help="write the rows and memory here")
    args = parser.parse_args()
    keras.config.set_dtype_policy("mixed_bfloat16")
    if args.batch:
        for size, shape in SIZES.items():
            SIZES[size] = (*shape[:-1], args.batch)
    print(
        f"python {platform.python_version()}, jax {jax.__version__}, keras "
        f"{keras.__version__}, keras_gradmon {keras_gradmon.__version__}, "
        f"devices {jax.devices()}; {args.steps} steps, {args.reps} reps",
        flush=True,
    )
    rows, memories = [], {}
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as log_root:
        for size in args.sizes.split(","):
            if not args.no_memory:
                memories[size] = memory(size, args.memory.split(","))
            variants = args.variants.split(",")
            rows += time_size(size, variants, args.steps, args.reps, log_root)
            print(format_table(rows), flush=True)
            if args.json:  # after each size: a run cut short keeps what it did
                save(args.json, rows, memories)
    print(format_table(rows, markdown=True))
    for size, report in memories.items():
        base = report["unwrapped"]["temp"]
        extra = {k: v["temp"] - base for k, v in report.items()}
        print(
            f"{size}: weights {4 * count_parameters(size)} bytes; temp over "
            f"unwrapped {extra}"
        )


def save(path: str, rows: list[dict], memories: dict) -> None:
    weights = {size: 4 * count_parameters(size) for size in memories}
    with open(path, "w") as file:
        json.dump({"rows": rows, "memory": memories, "weights": weights}, file)


if __name__ == "__main__":
    main()
