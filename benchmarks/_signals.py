"""The variants that price issue 21's in-step signals, shared by
`bench_keras.py` (TensorFlow) and `bench_jax.py` (JAX), and the optimizer
each variant trains with.

Every one records statistics every 100 steps with the summary callback, as
variant C does; they differ from C by one signal:

  C-no-update    C without the update/weight ratio (on by default): what
                 the ratio costs is C against this.
  C-spikes       + `track_spikes` (one global norm a step).  Target <= 1.10x.
  C-skip         + `skip_spikes` (that norm, a z-score, a gated update).
  C-clip         + global-norm clipping.
  C-clip-spikes  + both: the spikes reuse clipping's norm.
  A-acc2         plain Adam with `gradient_accumulation_steps=2`: the
                 baseline of the next one.
  C-noise-acc2   C + `noise_scale` over those 2 micro-batches.
"""

from __future__ import annotations

from typing import Any

import keras

from keras_gradmon import GradientMonitorOptimizer

HUNDRED = {"every_n_steps": 100, "histogram_every_n_steps": None}
#: The defaults (every 100, histograms every 1,000, update ratios), spelled
#: out (an empty dict means unwrapped).
DEFAULTS = {"every_n_steps": 100}
CLIP = {"method": "global_norm", "max_norm": 1.0}
ACCUMULATE = {"gradient_accumulation_steps": 2}

#: name: (options or None, with the callback); options may hold "inner"
#: (the inner Adam's extra arguments) and "unwrapped" (no monitor).
SIGNAL_VARIANTS: dict[str, tuple[dict | None, bool]] = {
    "C-no-update": ({**HUNDRED, "update_statistics": False}, True),
    "C-spikes": ({**HUNDRED, "track_spikes": True}, True),
    "C-skip": ({**HUNDRED, "skip_spikes": True}, True),
    "C-clip": ({**HUNDRED, "clipping": CLIP}, True),
    "C-clip-spikes": ({**HUNDRED, "clipping": CLIP, "track_spikes": True}, True),
    "A-acc2": ({"inner": ACCUMULATE, "unwrapped": True}, False),
    "C-noise-acc2": ({**HUNDRED, "inner": ACCUMULATE, "noise_scale": True}, True),
}
SIGNAL_TARGETS = {"C-spikes": 1.10}


def make_optimizer(options: dict | None) -> Any:
    """Adam(1e-3), wrapped with `options` (None: not wrapped)."""
    options = dict(options or {"unwrapped": True})
    inner = keras.optimizers.Adam(1e-3, **options.pop("inner", {}))
    if options.pop("unwrapped", False):
        return inner
    return GradientMonitorOptimizer(inner, **options)
