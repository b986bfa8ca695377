"""Pure, XLA-safe gradient clipping rules with explicit state.

Optax style: a rule holds validated hyper-parameters; `state_spec()` names
the variables it needs and `clip()` maps (grads, weights, global norm,
state values) to a `ClipResult` (clipped grads, new state values, post-clip
norm) with plain tensor math in `keras.ops`: the same code runs on the
TensorFlow backend (eagerly, in `tf.function`, under XLA) and under
`jax.jit`. The caller creates the variables, computes the global norm
(`global_norm_of`, overflow-safe) and assigns the new state.

Example:

>>> from keras import ops
>>> rule = make_clip_rule("global_norm", max_norm=1.0)
>>> grads = [ops.convert_to_tensor([6.0, 8.0])]
>>> result = rule.clip(grads, [], global_norm_of(grads), {})
>>> [round(x, 3) for x in ops.convert_to_numpy(result.grads[0]).tolist()]
[0.6, 0.8]
"""

from __future__ import annotations

import dataclasses

from keras_gradmon.core.clipping.agc import AdaptiveGradientClip
from keras_gradmon.core.clipping.autoclip import AutoClip
from keras_gradmon.core.clipping.base import (
    ClipResult,
    ClipRule,
    GlobalNorm,
    StateSpec,
    as_gradient,
    global_norm_of,
    post_clip_norm,
    scale_by_global_norm,
)
from keras_gradmon.core.clipping.global_norm import GlobalNormClip
from keras_gradmon.core.clipping.zclip import ZCLIP_MODES, ZClip

#: Rule class for each method name accepted by `make_clip_rule`.
CLIP_RULES: dict[str, type] = {
    rule.name: rule for rule in (AdaptiveGradientClip, AutoClip, GlobalNormClip, ZClip)
}


def make_clip_rule(method: str, **params: object) -> ClipRule:
    """Builds the clipping rule named `method` with hyper-parameters `params`.

    Args:
        method: One of "agc", "autoclip", "global_norm", "zclip".
        **params: The rule's constructor arguments.

    Returns:
        The rule.

    Raises:
        ValueError: For an unknown method, an unknown parameter, or an
            invalid parameter value.

    Example:

    >>> make_clip_rule("autoclip", percentile=5.0)
    AutoClip(percentile=5.0, history=1000)
    """
    if not isinstance(method, str) or method not in CLIP_RULES:
        raise ValueError(
            f"Unknown clipping method {method!r}. Valid methods: "
            f"{sorted(CLIP_RULES)}. Received: method={method!r}"
        )
    rule = CLIP_RULES[method]
    fields = dataclasses.fields(rule)
    valid = [field.name for field in fields]
    for name, value in params.items():
        if name not in valid:
            raise ValueError(
                f"Unknown parameter {name!r} for clipping method {method!r}. "
                f"Valid parameters: {valid}. Received: {name}={value!r}"
            )
    for field in fields:
        required = field.default is dataclasses.MISSING
        if required and field.name not in params:
            raise ValueError(
                f"Clipping method {method!r} needs the parameter "
                f"`{field.name}`. Received: {params!r}"
            )
    return rule(**params)


def rule_params(rule: ClipRule) -> dict[str, object]:
    """The hyper-parameters of `rule`, such that
    `make_clip_rule(rule.name, **rule_params(rule)) == rule`.

    Example:

    >>> rule_params(ZClip(warmup=10))["warmup"]
    10
    """
    return dataclasses.asdict(rule)


__all__ = [
    "CLIP_RULES",
    "ZCLIP_MODES",
    "AdaptiveGradientClip",
    "AutoClip",
    "ClipResult",
    "ClipRule",
    "GlobalNorm",
    "GlobalNormClip",
    "StateSpec",
    "ZClip",
    "as_gradient",
    "global_norm_of",
    "make_clip_rule",
    "post_clip_norm",
    "rule_params",
    "scale_by_global_norm",
]
