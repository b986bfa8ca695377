"""Hypothesis strategies shared by the statistics tests (TensorFlow and JAX)."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

finite_floats = st.floats(-1e3, 1e3, width=32, allow_subnormal=False)
special = st.sampled_from([0.0, float("nan"), float("inf"), float("-inf")])
#: float32 arrays of up to 3 dims, empty ones included, with NaN/Inf/0.
arrays = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=9),
    elements=st.one_of(finite_floats, finite_floats, special),
)
