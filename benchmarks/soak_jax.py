"""Memory over a long JAX `fit`: `tests/jax/test_long_run.py`'s run (a small
MLP, batch 1, statistics every 10 steps, histograms every 100, the summary
and alert callbacks) at full length, RSS after each epoch. The test runs
2,000 steps; this runs 10,000 by default and checks the same bound.

Run from the repository root:

    .venv/bin/python benchmarks/soak_jax.py
    .venv/bin/python benchmarks/soak_jax.py --steps-per-epoch 5000
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.jax.test_long_run import EPOCHS, GROWTH_MIB, long_fit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps-per-epoch", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    args = parser.parse_args()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as log_dir:
        optimizer, rss = long_fit(log_dir, args.steps_per_epoch, args.epochs)
    steps = int(optimizer.read_iterations())
    growth = max(rss[2:]) - rss[2]
    print(f"{steps:,} steps in {time.perf_counter() - start:.0f} s")
    print("RSS after each epoch (MiB): " + ", ".join(f"{r:.0f}" for r in rss))
    verdict = "met" if growth < GROWTH_MIB else "NOT MET"
    print(f"growth after epoch 2: {growth:.1f} MiB (< {GROWTH_MIB}): {verdict}")


if __name__ == "__main__":
    main()
