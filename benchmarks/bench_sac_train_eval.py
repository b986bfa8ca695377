"""tf-agents' own SAC `train_eval`, unwrapped and with its three optimizers
monitored: the wall time of a short run, in fresh processes.

`tf_agents/agents/sac/examples/v2/train_eval.py` as shipped (tf-agents 0.19):
its `tf.compat.v1.train.AdamOptimizer`s for the actor, the critics and alpha,
`common.function` (AutoGraph off, no XLA), a default summary writer under
`record_if(global_step % 1000 == 0)`, checkpointers, 10,000 initial collect
steps and an evaluation of 30 episodes. Its default environment
(HalfCheetah-v2) needs MuJoCo, which is not installed here, so it runs
gym's Pendulum-v1 (`env_load_fn=suite_gym.load`); everything else is the
function's defaults but `num_iterations` (30).

  plain     the example as shipped: the baseline.
  wrapped   `SacAgent` replaced, where the example looks it up, by
            `monitored(SacAgent, every_n_steps=100)`: the three optimizers
            wrapped, with tag scopes actor, critic and alpha.

Each run is a process of its own (what a user of the example pays, tracing
included; TensorFlow's import is not counted); variants take turns, `--reps`
times. Target (issue 19): wrapped at most 1.3x plain (median wall time).

    TF_USE_LEGACY_KERAS=1 .venv/bin/python benchmarks/bench_sac_train_eval.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

TARGET = 1.3


def run_once(variant: str, iterations: int) -> dict:
    """Wall and CPU seconds of one `train_eval` run, in this process."""
    from types import SimpleNamespace

    from tf_agents.agents.sac import sac_agent
    from tf_agents.agents.sac.examples.v2 import train_eval
    from tf_agents.environments import suite_gym

    from keras_gradmon.integrations.tf_agents import monitored

    if variant == "wrapped":
        train_eval.sac_agent = SimpleNamespace(
            SacAgent=monitored(sac_agent.SacAgent, every_n_steps=100)
        )
    root = tempfile.mkdtemp(prefix="bench_sac_")
    start, cpu = time.perf_counter(), time.process_time()
    train_eval.train_eval(
        root,
        env_name="Pendulum-v1",
        env_load_fn=suite_gym.load,
        num_iterations=iterations,
    )
    return {"wall": time.perf_counter() - start, "cpu": time.process_time() - cpu}


def measure(variant: str, iterations: int) -> dict:
    """`run_once` in a fresh Python process."""
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--one", variant],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "ITERATIONS": str(iterations)},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(runs: dict[str, list[dict]]) -> str:
    """Markdown: median wall and CPU seconds, ratios to plain, verdict."""
    base = runs["plain"]
    lines = [
        "| variant | wall s (median) | runs | ratio (median) | ratio (min/min) "
        "| CPU ratio | target | verdict |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | :---: |",
    ]
    for variant, results in runs.items():
        wall = [r["wall"] for r in results]
        ratio = statistics.median(wall) / statistics.median(r["wall"] for r in base)
        cpu = statistics.median(r["cpu"] for r in results) / statistics.median(
            r["cpu"] for r in base
        )
        target = "-" if variant == "plain" else f"<= {TARGET}x"
        verdict = "-" if variant == "plain" else ("pass" if ratio <= TARGET else "FAIL")
        lines.append(
            f"| {variant} | {statistics.median(wall):.1f} "
            f"| {', '.join(f'{w:.1f}' for w in wall)} | {ratio:.2f}x "
            f"| {min(wall) / min(r['wall'] for r in base):.2f}x | {cpu:.2f}x "
            f"| {target} | {verdict} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--one", metavar="VARIANT")
    args = parser.parse_args()
    if args.one:
        iterations = int(os.environ.get("ITERATIONS", args.iterations))
        print(json.dumps(run_once(args.one, iterations)))
        return
    runs: dict[str, list[dict]] = {"plain": [], "wrapped": []}
    for rep in range(args.reps):
        for variant in list(runs) if rep % 2 == 0 else list(runs)[::-1]:
            runs[variant].append(measure(variant, args.iterations))
    print(table(runs))


if __name__ == "__main__":
    main()
