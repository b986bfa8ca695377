"""The default alert rules on real runs, on JAX: the faults alerted at
once and a healthy BatchNorm CNN silent, as on TensorFlow."""

import pytest

from tests.alerts.test_scenarios import (  # noqa: F401
    test_a_batchnorm_cnn_trained_to_convergence_raises_nothing,
    test_a_deep_sigmoid_stack_alerts_vanishing_layers_at_the_documented_step,
    test_a_learning_rate_jump_alerts_within_5_steps,
    test_a_nan_input_is_critical_at_that_very_step,
)

#: Runs before the quick files (tests/conftest.py).
pytestmark = pytest.mark.slow
