"""One monitored run on the current Keras backend, for the parity tests:
the same weights and the same gradients, applied eagerly step by step
(`optimizer.apply`), so that the numbers compared are the monitor's alone.

    python -m tests.jax.monitor_side IN.npz OUT.npz   (KERAS_BACKEND set)

`IN.npz` holds `weight_<i>`, `grad_<step>_<i>` and JSON `configs` (by
name); `OUT.npz` gets each run's state and its variables after the run.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def scenario(seed: int = 0, steps: int = 4) -> dict[str, np.ndarray]:
    """Weights and gradients of a small conv net's shapes: normal values,
    a gradient with zeros and huge values, one step with a NaN (skipped
    under `skip_nonfinite`), and a variable without a gradient at step 1."""
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
    del data["grad_1_5"]
    return data


def run(data: dict[str, np.ndarray], config: dict) -> dict[str, np.ndarray]:
    """Applies the scenario's gradients with a monitored SGD (a power-of-two
    learning rate: one rounding per update, the same on every backend, so
    the weights each step measures are the same too); the state and the
    final variables as NumPy."""
    import keras

    from keras_gradmon import GradientMonitorOptimizer

    count = len([k for k in data if k.startswith("weight_")])
    variables = [
        keras.Variable(data[f"weight_{i}"], name=f"v{i}") for i in range(count)
    ]
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(2.0**-10), **config)
    steps = 1 + max(int(k.split("_")[1]) for k in data if k.startswith("grad_"))
    for step in range(steps):
        pairs = [
            (data[f"grad_{step}_{i}"], variables[i])
            for i in range(count)
            if f"grad_{step}_{i}" in data
        ]
        optimizer.apply([g for g, _ in pairs], [v for _, v in pairs])
    state = optimizer.monitor.state
    out = {
        f"variable_{i}": keras.ops.convert_to_numpy(v) for i, v in enumerate(variables)
    }
    for name, variable in state.variables.items():
        out[f"state_{name}"] = keras.ops.convert_to_numpy(variable)
    return out


def run_all(data: dict[str, np.ndarray], configs: dict) -> dict[str, np.ndarray]:
    """`run` of each `{name: config}`, its arrays keyed `<name>/<key>`."""
    out = {}
    for name, config in configs.items():
        out.update({f"{name}/{k}": v for k, v in run(data, config).items()})
    return out


def main() -> None:
    source, target = sys.argv[1:3]
    loaded = dict(np.load(source))
    configs = json.loads(str(loaded.pop("configs")))
    np.savez(target, **run_all(loaded, configs))


if __name__ == "__main__":
    main()
