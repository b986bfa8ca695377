"""The inputs the JAX tests share with their TensorFlow side (`tf_side.py`):
NumPy arrays, and the dtype each is computed in."""

from __future__ import annotations

import numpy as np

from tests.reference import flush_subnormals, hard_cases

#: Input dtypes beyond float32 (bfloat16 is stored as float32 in an .npz).
HALF = {"half": "float16", "brain": "bfloat16"}
BUCKETS = 7


def statistic_cases() -> dict[str, np.ndarray]:
    """Named float32 arrays: mixed sizes, NaN/Inf, zeros, empty, huge values
    near float32's max, subnormals (flushed, as both backends' CPU kernels
    treat them), and `HALF`'s inputs."""
    rng = np.random.default_rng(20)
    cases = {f"hard{i}": v for i, v in enumerate(hard_cases())}
    for i, size in enumerate([1, 5, 63, 64, 65, 1000, 4097]):
        cases[f"size{i}"] = (rng.normal(size=size) * 10.0 ** (i - 3)).astype("f4")
    huge = rng.uniform(-3.4e38, 3.4e38, size=50).astype("f4")
    cases["huge"], cases["huge_ones"] = huge, np.full([40], 3.4e38, "f4")
    cases["subnormal"] = flush_subnormals([1e-40, 0.0, 2e-39, -1e-39, 1e-37, 3.0])
    cases["tiny"] = (rng.normal(size=200) * 1e-36).astype("f4")
    cases["half"] = (rng.normal(size=(7, 3)) * 300).astype("f4")
    cases["brain"] = (rng.normal(size=40) * 1e20).astype("f4")
    cases["brain"][3] = np.nan
    return cases


def as_dtype(name: str, values: np.ndarray, ops) -> object:
    """`values` as a tensor of the dtype its case is computed in."""
    return ops.cast(ops.convert_to_tensor(values), HALF.get(name, "float32"))


def held(name: str, values: np.ndarray, ops) -> np.ndarray:
    """The float64 values the statistics are of (after the cast)."""
    return np.asarray(ops.cast(as_dtype(name, values, ops), "float32"), np.float64)


#: Tensors whose global norm is finite in float32 (parity is checked there).
NORM_CASES = ["size1", "size4", "hard11", "half", "tiny"]
