"""Every invalid constructor argument is rejected, naming argument and value."""

from __future__ import annotations

import math
import re

import pytest

from keras_gradmon.alerts import (
    AlertEngine,
    GrowthRule,
    NonFiniteRule,
    RateLimiter,
    SpikeRule,
    ThresholdRule,
    VanishingRule,
)


def _regex_error(pattern):
    try:
        re.compile(pattern)
    except re.error as err:
        return str(err)
    raise AssertionError(f"{pattern!r} is a valid regex")


POSITIVE = "must be a positive finite number"
POSITIVE_INT = "must be a positive integer"

CASES = [
    (lambda: ThresholdRule(warning=-1), f"`warning` {POSITIVE}. Received: warning=-1"),
    (lambda: ThresholdRule(warning=0), f"`warning` {POSITIVE}. Received: warning=0"),
    (
        lambda: ThresholdRule(warning="10"),
        f"`warning` {POSITIVE}. Received: warning='10'",
    ),
    (
        lambda: ThresholdRule(warning=True),
        f"`warning` {POSITIVE}. Received: warning=True",
    ),
    (
        lambda: ThresholdRule(critical=math.nan),
        f"`critical` {POSITIVE}. Received: critical=nan",
    ),
    (
        lambda: ThresholdRule(critical=math.inf),
        f"`critical` {POSITIVE}. Received: critical=inf",
    ),
    (
        lambda: ThresholdRule(),
        "At least one of `warning` or `critical` must be given. "
        "Received: warning=None, critical=None",
    ),
    (
        lambda: ThresholdRule(warning=100, critical=10),
        "`warning` must be smaller than `critical`. Received: warning=100, critical=10",
    ),
    (
        lambda: ThresholdRule(warning=10, critical=10.0),
        "`warning` must be smaller than `critical`. "
        "Received: warning=10, critical=10.0",
    ),
    (
        lambda: ThresholdRule(warning=1, critical_patience=0),
        f"`critical_patience` {POSITIVE_INT}. Received: critical_patience=0",
    ),
    (
        lambda: ThresholdRule(warning=1, critical_patience=1.5),
        f"`critical_patience` {POSITIVE_INT}. Received: critical_patience=1.5",
    ),
    (
        lambda: ThresholdRule(warning=1, subjects="dense/("),
        f"`subjects` must be a valid regular expression ({_regex_error('dense/(')})."
        " Received: subjects='dense/('",
    ),
    (
        lambda: NonFiniteRule(subjects=3),
        "`subjects` must be a regular expression string or None. Received: subjects=3",
    ),
    (lambda: NonFiniteRule(hint=3), "`hint` must be a string. Received: hint=3"),
    (
        lambda: GrowthRule(metric=""),
        "`metric` must be a non-empty string. Received: metric=''",
    ),
    (lambda: VanishingRule(floor=0), f"`floor` {POSITIVE}. Received: floor=0"),
    (lambda: VanishingRule(floor=-1e-3), f"`floor` {POSITIVE}. Received: floor=-0.001"),
    (
        lambda: VanishingRule(floor=1e-3, patience=0),
        f"`patience` {POSITIVE_INT}. Received: patience=0",
    ),
    (
        lambda: VanishingRule(floor=1e-3, patience=-2),
        f"`patience` {POSITIVE_INT}. Received: patience=-2",
    ),
    (
        lambda: SpikeRule(z_threshold=0),
        f"`z_threshold` {POSITIVE}. Received: z_threshold=0",
    ),
    (
        lambda: SpikeRule(z_threshold=-6.0),
        f"`z_threshold` {POSITIVE}. Received: z_threshold=-6.0",
    ),
    (lambda: SpikeRule(window=0), f"`window` {POSITIVE_INT}. Received: window=0"),
    (
        lambda: SpikeRule(min_samples=1.5),
        f"`min_samples` {POSITIVE_INT}. Received: min_samples=1.5",
    ),
    (lambda: GrowthRule(warmup=-1), f"`warmup` {POSITIVE_INT}. Received: warmup=-1"),
    (lambda: SpikeRule(warmup=0), f"`warmup` {POSITIVE_INT}. Received: warmup=0"),
    (lambda: SpikeRule(warmup=2.0), f"`warmup` {POSITIVE_INT}. Received: warmup=2.0"),
    (
        lambda: SpikeRule(min_log_std=0.0),
        f"`min_log_std` {POSITIVE}. Received: min_log_std=0.0",
    ),
    *[
        (
            lambda f=f: GrowthRule(factor=f),
            f"`factor` must be a finite number greater than 1. Received: factor={f}",
        )
        for f in (1, 0.5, -10, math.inf)
    ],
    (lambda: GrowthRule(window=0), f"`window` {POSITIVE_INT}. Received: window=0"),
    (
        lambda: RateLimiter(cooldown_steps=-1),
        "`cooldown_steps` must be a non-negative integer. Received: cooldown_steps=-1",
    ),
    (
        lambda: RateLimiter(cooldown_steps=1.5),
        "`cooldown_steps` must be a non-negative integer. Received: cooldown_steps=1.5",
    ),
    (
        lambda: RateLimiter(max_per_rule=0),
        f"`max_per_rule` {POSITIVE_INT}. Received: max_per_rule=0",
    ),
    (
        lambda: AlertEngine(rules="threshold"),
        "`rules` must be a mapping of names to rules or a sequence of rules. "
        "Received: rules='threshold'",
    ),
    (
        lambda: AlertEngine(rules=[42]),
        "`rules` must hold `Rule` objects under string names. Received: rules=[42]",
    ),
    (
        lambda: AlertEngine(rules={1: NonFiniteRule()}),
        "`rules` must hold `Rule` objects under string names. "
        "Received: rules={1: NonFiniteRule(metric='grad_nonfinite', subjects=None)}",
    ),
    (
        lambda: AlertEngine(limiter=5),
        "`limiter` must be a RateLimiter or None. Received: limiter=5",
    ),
]


@pytest.mark.parametrize(("build", "message"), CASES)
def test_invalid_argument_is_rejected(build, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        build()


def test_valid_arguments_are_stored_as_numbers():
    rule = ThresholdRule(warning=10, critical=50, critical_patience=3)
    assert (rule.warning, rule.critical, rule.critical_patience) == (10.0, 50.0, 3)
    spike = SpikeRule(z_threshold=4, window=50, warmup=1)
    assert (spike.z_threshold, spike.window, spike.warmup) == (4.0, 50, 1)
    assert RateLimiter(cooldown_steps=0).cooldown_steps == 0
