"""One monitored run on the current Keras backend, for the parity tests:
the same weights and the same gradients, applied eagerly step by step
(`optimizer.apply`), so that the numbers compared are the monitor's alone.

    python -m tests.jax.monitor_side IN.npz OUT.npz   (KERAS_BACKEND set)

`IN.npz` holds `weight_<i>`, `grad_<step>_<i>`, JSON `configs` (by
name) and JSON `gaps` (the names of those run without the gradient `GAP`);
`OUT.npz` gets each run's state and its variables after the run.
"""

from __future__ import annotations

import json
import sys

import numpy as np

#: The gradient a run with a gap lacks: variable 5's at step 1 (a step of
#: another structure, so a second compile of the monitored step).
GAP = "grad_1_5"


def scenario(seed: int = 0, steps: int = 4) -> dict[str, np.ndarray]:
    """Weights and gradients of a small conv net's shapes: normal values,
    a gradient with zeros and huge values, one step with a NaN (skipped
    under `skip_nonfinite`), and the gradient `GAP`, which `run(gap=True)`
    leaves out (a variable without a gradient at step 1)."""
    rng = np.random.default_rng(seed)
    shapes = [(3, 3, 3, 8), (8,), (8,), (8,), (32, 16), (16,), (16, 3), (3,)]
    data = {
        f"weight_{i}": rng.normal(size=s).astype("float32")
        for i, s in enumerate(shapes)
    }
    for step in range(steps):
        for i, shape in enumerate(shapes):
            grad = (rng.normal(size=shape) * 10.0 ** rng.integers(-3, 2)).astype(
                "float32"
            )
            grad[rng.random(shape) < 0.2] = 0.0
            data[f"grad_{step}_{i}"] = grad
    data[f"grad_2_{0}"][0, 0, 0, 0] = np.nan
    data["grad_3_4"][0, :4] = 3e30
    return data


def run(
    data: dict[str, np.ndarray], config: dict, gap: bool = False
) -> dict[str, np.ndarray]:
    """Applies the scenario's gradients with a monitored SGD (a power-of-two
    learning rate: one rounding per update, the same on every backend, so
    the weights each step measures are the same too), without the gradient
    `GAP` if `gap`; the state and the final variables as NumPy."""
    import keras

    from keras_gradmon import GradientMonitorOptimizer

    count = len([k for k in data if k.startswith("weight_")])
    variables = [
        keras.Variable(data[f"weight_{i}"], name=f"v{i}") for i in range(count)
    ]
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(2.0**-10), **config)
    grads = {k: v for k, v in data.items() if k.startswith("grad_")}
    if gap:
        del grads[GAP]
    steps = 1 + max(int(k.split("_")[1]) for k in grads)
    for step in range(steps):
        pairs = [
            (grads[f"grad_{step}_{i}"], variables[i])
            for i in range(count)
            if f"grad_{step}_{i}" in grads
        ]
        optimizer.apply([g for g, _ in pairs], [v for _, v in pairs])
    state = optimizer.monitor.state
    out = {
        f"variable_{i}": keras.ops.convert_to_numpy(v) for i, v in enumerate(variables)
    }
    for name, variable in state.variables.items():
        out[f"state_{name}"] = keras.ops.convert_to_numpy(variable)
    return out


def run_all(
    data: dict[str, np.ndarray], configs: dict, gaps: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """`run` of each `{name: config}` (with the gap if its name is in
    `gaps`), its arrays keyed `<name>/<key>`."""
    out = {}
    for name, config in configs.items():
        arrays = run(data, config, gap=name in gaps)
        out.update({f"{name}/{k}": v for k, v in arrays.items()})
    return out


def main() -> None:
    source, target = sys.argv[1:3]
    loaded = dict(np.load(source))
    configs = json.loads(str(loaded.pop("configs")))
    gaps = tuple(json.loads(str(loaded.pop("gaps"))))
    np.savez(target, **run_all(loaded, configs, gaps))


if __name__ == "__main__":
    main()
