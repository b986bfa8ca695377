"""The default alert rules on real runs: false alarms on healthy training,
detection delays of faults, and the console lines of each incident.

Every scenario runs in a fresh process of its own (the tf-agents one with
`TF_USE_LEGACY_KERAS=1`), with statistics every step and every monitor's
rules at their defaults (`tests/scenarios/`). Healthy runs: the 100k-step
memory soak's MLP memorizing random labels, a transformer, a BatchNorm CNN
and an LSTM trained to convergence, and the DQN CartPole example. Faults: a
100x learning-rate jump (target: an alert within 5 steps), a batch with a
NaN input (critical at that step), a dead-ReLU onset (at the next
activation summary) and a deep sigmoid stack (vanishing layers at step
100, the rule's patience).

Standard architectures (issue 30): keras.applications MobileNetV3Small and
ResNet50V2 (on TensorFlow and JAX), MobileNetV2, EfficientNetB0 and
DenseNet121 at 32x32, healthy for 300 steps with activations every 10
steps (`tests/scenarios/applications.py`), and the two first ones with a
ReLU layer killed (its BatchNorm offset pushed to -100) at step 155:
caught at the next summary, step 160. For each, what the activation rules
saw: the std's range, the largest dead fraction, the largest fall of a
layer's std and the largest share of its live units dying within 5
summaries (the rules fire at 100x and 90%). And an MLP whose activations
collapse after SGD's learning rate jumps to 50 (caught within 5 steps).

Run from the repository root:

    .venv/bin/python benchmarks/bench_alerts.py            # the full runs
    .venv/bin/python benchmarks/bench_alerts.py --quick    # shortened
    .venv/bin/python benchmarks/bench_alerts.py --scenarios lstm,nan_input
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: name -> (module, function, full steps, quick steps, expected fault
#: alert (rule, tier, the most steps it may take) or None when healthy).
SCENARIOS = {
    "memorizer": ("gradients", "memorizer", 100_000, 5_000, None),
    "transformer": ("gradients", "transformer", 3_000, 1_500, None),
    "bn_cnn": ("gradients", "bn_cnn", 2_000, 1_000, None),
    "lstm": ("gradients", "lstm", 3_000, 1_500, None),
    "dqn_cartpole": ("dqn", "cartpole", 3_000, 600, None),
    "learning_rate_jump": (
        "gradients", "learning_rate_jump", 1_200, 700, (None, None, 5)
    ),
    "nan_input": ("gradients", "nan_input", 400, 400, ("nonfinite", "critical", 0)),
    "dead_relu": ("activations", "dead_relu_onset", 300, 300, (None, None, 0)),
    "sigmoid_stack": (
        "gradients", "sigmoid_stack", 300, 300, ("vanishing_layers", None, 100)
    ),
    # The learning rate jumps at step 150; "h2" dies over the next steps.
    "activation_collapse": (
        "activations", "collapse_after_bad_learning_rate", 300, 300,
        ("dead_units", None, 5),
    ),
    # keras.applications at 32x32, activations every 10 steps (issue 30).
    "mobilenet_v3_small": ("applications", "MobileNetV3Small", 300, 100, None),
    "mobilenet_v3_small_jax": (
        "applications_jax", "MobileNetV3Small", 300, 100, None
    ),
    "resnet50v2": ("applications", "ResNet50V2", 300, 100, None),
    "resnet50v2_jax": ("applications_jax", "ResNet50V2", 300, 100, None),
    "mobilenet_v2": ("applications", "MobileNetV2", 300, 100, None),
    "efficientnet_b0": ("applications", "EfficientNetB0", 300, 100, None),
    "densenet121": ("applications", "DenseNet121", 300, 100, None),
    "mobilenet_v3_small_dead_layer": (
        "applications", "MobileNetV3Small/dead_layer", 300, 100,
        ("dead_units", None, 10),
    ),
    # The probe's outputs turn NaN after this fault (critical at once).
    "resnet50v2_dead_layer": (
        "applications", "ResNet50V2/dead_layer", 300, 100,
        ("nonfinite", "critical", 10),
    ),
}


def run_one(name: str, steps: int, out: str) -> None:
    """Runs scenario `name` in this process and writes its outcome as JSON."""
    sys.path.insert(0, str(ROOT))
    import importlib

    module, function, *_, expected = SCENARIOS[name]
    rule, tier, _ = expected or (None, None, None)
    if module.startswith("applications"):
        return run_application(function, steps, out, rule, tier)
    scenario = getattr(importlib.import_module(f"tests.scenarios.{module}"), function)
    kwargs = {"iterations": steps} if module == "dqn" else {"steps": steps}
    if module == "dqn":
        kwargs["log_dir"] = tempfile.mkdtemp(prefix="bench_alerts_dqn_")
    outcome = scenario(**kwargs)
    Path(out).write_text(json.dumps(outcome.to_dict(rule, tier)))


def run_application(
    function: str, steps: int, out: str, rule: str | None, tier: str | None
) -> None:
    """Runs a keras.applications scenario ("<architecture>[/<fault>]"),
    the fault 5 steps after half way (between two summaries); writes its
    outcome and what the activation rules saw (`level_summary`)."""
    from tests.scenarios.applications import application, level_summary

    name, _, fault = function.partition("/")
    onset = steps // 2 + 5 if fault else None
    outcome, levels = application(name, steps, fault=fault or None, onset=onset)
    data = {**outcome.to_dict(rule, tier), "levels": level_summary(levels.snapshots)}
    Path(out).write_text(json.dumps(data))


def spawn(name: str, steps: int) -> dict:
    """Runs scenario `name` in a fresh process; its outcome."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    if SCENARIOS[name][0] == "dqn":
        env["TF_USE_LEGACY_KERAS"] = "1"
    if SCENARIOS[name][0].endswith("_jax"):
        env["KERAS_BACKEND"] = "jax"
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, __file__, "--one", name, "--steps", str(steps)]
        subprocess.run([*command, "--out", out.name], env=env, check=True, cwd=ROOT)
        return json.loads(Path(out.name).read_text())


def verdict(outcome: dict, expected: tuple | None) -> str:
    """Met or not: no false alarm, and the fault's alert within its delay."""
    if outcome["false_alarms"]:
        return "NOT MET: false alarms"
    if expected is None:
        return "met" if not outcome["alerts"] else "NOT MET"
    delay, limit = outcome["delay"], expected[2]
    return "met" if delay is not None and delay <= limit else "NOT MET: missed"


def row(name: str, outcome: dict, expected: tuple | None) -> str:
    delay = outcome["delay"]
    kind = "healthy" if expected is None else f"fault at {outcome['fault_step']}"
    wanted = "-" if expected is None else f"<= {expected[2]}"
    loss = outcome["final_loss"]
    return (
        f"| {name} | {kind} | {outcome['steps']:,} | "
        f"{'-' if loss is None else f'{loss:.3g}'} | {len(outcome['alerts'])} | "
        f"{len(outcome['false_alarms'])} | {'-' if delay is None else delay} "
        f"({wanted}) | {len(outcome['lines'])} | {outcome['seconds']:.0f} | "
        f"{verdict(outcome, expected)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--quick", action="store_true", help="shortened runs")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return run_one(args.one, args.steps, args.out)
    names = args.scenarios.split(",")
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {sorted(SCENARIOS)}")
    rows, consoles, levels = [], [], []
    for name in names:
        *_, full, quick, expected = SCENARIOS[name]
        outcome = spawn(name, quick if args.quick else full)
        rows.append(row(name, outcome, expected))
        if "levels" in outcome:
            levels.append(level_row(name, outcome["levels"]))
        consoles.append(f"\n### {name}\n" + "\n".join(outcome["lines"] or ["(none)"]))
        print(rows[-1], flush=True)
    print(
        "\n| scenario | kind | steps | final loss | alerts | false alarms | "
        "delay, steps (target) | console lines | seconds | verdict |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n## Console lines\n" + "\n".join(consoles))
    if levels:
        print("\n## What the activation rules saw\n")
        print(
            "| scenario | layers | summaries | std, min to max | largest dead "
            "fraction | largest std fall in 5 summaries | largest share of live "
            "units dying in 5 summaries |"
        )
        print("|---|---|---|---|---|---|---|")
        print("\n".join(levels))


def level_row(name: str, levels: dict) -> str:
    """One row of what the activation rules saw on a run."""
    dead, fall, dying = (
        levels["dead_max"], levels["std_fall_max"], levels["live_units_dying_max"]
    )
    return (
        f"| {name} | {levels['layers']} | {levels['summaries']} | "
        f"{levels['std_min']:.3g} to {levels['std_max']:.3g} | "
        f"{dead[0]:.2f} ({dead[1]}) | {fall[0]:.2f}x ({fall[1]}) | "
        f"{dying[0]:.0%} ({dying[1]}) |"
    )


if __name__ == "__main__":
    main()
