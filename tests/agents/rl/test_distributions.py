"""Entropy, KL, approximate KL and explained variance under common.function,
against closed forms and NumPy float64 on fixed logits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from tf_agents.specs import tensor_spec
from tf_agents.utils import common

from keras_gradmon.rl import probes as D

LOGITS_BEFORE = np.array(
    [[0.3, -1.2, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0], [-3.0, 0.5, 0.25, 4.0]], np.float32
)
LOGITS_AFTER = np.array(
    [[0.1, -1.0, 2.2, 0.4], [1.5, 0.5, 1.0, 0.9], [-2.0, 0.0, 0.5, 3.5]], np.float32
)


def _softmax(logits):
    z = np.asarray(logits, np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _epsilon_greedy_entropy(epsilon: float, n: int) -> float:
    """Closed form: the greedy action has 1 - eps + eps/n, the others eps/n."""
    top, rest = 1 - epsilon + epsilon / n, epsilon / n
    return -(top * math.log(top) + (n - 1) * (rest * math.log(rest) if rest else 0))


@common.function
def _entropy(probs):
    return D.entropy_of(tfp.distributions.Categorical(probs=probs), outer_rank=1)


def test_entropy_of_uniform_one_hot_and_epsilon_greedy():
    n = 6
    probs = np.stack([np.full(n, 1 / n), np.eye(n)[2]]).astype(np.float32)
    got = _entropy(tf.constant(probs)).numpy()
    np.testing.assert_allclose(got, [math.log(n), 0.0], rtol=1e-6, atol=0)
    logits = tf.constant([[0.1, 3.0, -1.0, 0.5, 0.2, 0.0]] * 2)

    @common.function
    def mixed(epsilon):
        return _entropy(D.epsilon_greedy_probs(logits, epsilon))

    for epsilon in (0.0, 0.1, 0.5, 1.0):
        got = mixed(tf.constant(epsilon)).numpy()
        np.testing.assert_allclose(got, _epsilon_greedy_entropy(epsilon, n), rtol=1e-6)
    allowed = tf.constant([[1.0, 1, 0, 0, 0, 0]] * 2)  # explore among 2 actions
    masked = common.function(lambda: D.epsilon_greedy_probs(logits, 0.5, allowed))
    got = _entropy(masked())
    np.testing.assert_allclose(got, _epsilon_greedy_entropy(0.5, 2), rtol=1e-6)
    assert D.max_entropy(tensor_spec.BoundedTensorSpec([], tf.int64, 0, n - 1)) == (
        pytest.approx(math.log(n), rel=1e-15)
    )
    assert D.max_entropy(tensor_spec.BoundedTensorSpec([2], tf.float32, -1, 1)) is None


def test_kl_and_approximate_kl_against_numpy():
    p, q = _softmax(LOGITS_BEFORE), _softmax(LOGITS_AFTER)
    want = np.sum(p * (np.log(p) - np.log(q)), axis=-1)

    @common.function
    def kl(before, after):
        return D.categorical_kl(tf.nn.softmax(before), tf.nn.softmax(after))

    got = kl(tf.constant(LOGITS_BEFORE), tf.constant(LOGITS_AFTER)).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-7)
    # tfp agrees (Categorical || Categorical is registered)
    tfp_kl = tfp.distributions.kl_divergence(
        tfp.distributions.Categorical(logits=LOGITS_BEFORE),
        tfp.distributions.Categorical(logits=LOGITS_AFTER),
    )
    np.testing.assert_allclose(got, tfp_kl.numpy(), rtol=2e-5, atol=1e-7)
    # approx KL at fixed actions: mean((r - 1) - ln r), r = q(a) / p(a)
    actions = np.array([2, 0, 3])
    log_r = np.log(q[np.arange(3), actions]) - np.log(p[np.arange(3), actions])
    weights = np.array([1.0, 0.0, 1.0])
    want_approx = np.sum(weights * (np.exp(log_r) - 1 - log_r)) / weights.sum()
    got = common.function(D.approx_kl)(
        tf.constant(log_r, tf.float32), tf.constant(weights, tf.float32)
    )
    np.testing.assert_allclose(float(got), want_approx, rtol=1e-5)


def test_kl_to_a_distribution_missing_an_action_is_infinite():
    before = tf.constant([[0.5, 0.5, 0.0]])
    after = tf.constant([[1.0, 0.0, 0.0]])
    assert np.isinf(common.function(D.categorical_kl)(before, after).numpy()[0])
    # zero-probability actions of `before` contribute nothing
    got = common.function(D.categorical_kl)(after, before).numpy()[0]
    assert got == pytest.approx(math.log(2), rel=1e-6)


def test_explained_variance_against_numpy():
    rng = np.random.default_rng(0)
    returns = rng.normal(5, 2, 50)
    values = returns + rng.normal(0, 1, 50)
    weights = (rng.random(50) > 0.2).astype(np.float64)

    def variance(x):
        mean = np.sum(weights * x) / weights.sum()
        return np.sum(weights * (x - mean) ** 2) / weights.sum()

    want = 1 - variance(returns - values) / variance(returns)
    got = common.function(D.explained_variance)(
        tf.constant(values, tf.float32),
        tf.constant(returns, tf.float32),
        tf.constant(weights, tf.float32),
    )
    np.testing.assert_allclose(float(got), want, rtol=1e-5)
    exact = tf.constant(returns)
    perfect = common.function(D.explained_variance)(exact, exact)
    assert float(perfect) == 1.0


def test_sampled_entropy_when_there_is_no_closed_form():
    # a tanh-squashed normal (SAC's actions) has no analytic entropy
    squashed = tfp.distributions.TransformedDistribution(
        tfp.distributions.Normal(tf.zeros([2000]), 0.5), tfp.bijectors.Tanh()
    )
    got = common.function(lambda: D.entropy_of(squashed, outer_rank=1))().numpy()
    # H[tanh(X)] = H[X] + E[ln(1 - tanh(X)^2)], X ~ N(0, 0.5^2)
    x = np.random.default_rng(0).normal(0, 0.5, 1_000_000)
    want = 0.5 * math.log(2 * math.pi * math.e * 0.25) + np.mean(
        np.log(1 - np.tanh(x) ** 2)
    )
    assert got.mean() == pytest.approx(want, abs=0.02)
