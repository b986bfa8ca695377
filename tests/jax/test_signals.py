"""The in-step signals on JAX: the same tests as on TensorFlow (update/
weight ratio against NumPy SGD, Adam and AdamW steps; spikes between
summaries; skipped spikes bit for bit against an unwrapped run; the noise
scale of gradient accumulation against its closed form)."""

from tests.test_noise_scale_fit import *  # noqa: F403
from tests.test_signals_run import *  # noqa: F403
from tests.test_spikes import *  # noqa: F403
from tests.test_update_ratio import *  # noqa: F403
