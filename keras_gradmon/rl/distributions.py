"""The policy and value statistics, as TensorFlow functions of tensors.

Entropy, KL divergence, the approximate KL of SB3 and CleanRL, the
epsilon-greedy mixture and the explained variance. Every function works
inside a `tf.function` with AutoGraph off. Weighted means skip masked
entries (weight 0), e.g. the boundary steps of a trajectory batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

#: Samples per state when an entropy has no closed form (e.g. SAC's
#: tanh-squashed normal): the estimate is -mean(log pi(a)), a ~ pi.
ENTROPY_SAMPLES = 8


def weighted_mean(values: tf.Tensor, weights: tf.Tensor | None = None) -> tf.Tensor:
    """`sum(w * v) / sum(w)`; the plain mean when `weights` is None."""
    values = tf.cast(values, tf.float32)
    if weights is None:
        return tf.reduce_mean(values)
    weights = tf.cast(tf.broadcast_to(weights, tf.shape(values)), tf.float32)
    return tf.math.divide_no_nan(
        tf.reduce_sum(values * weights), tf.reduce_sum(weights)
    )


def _safe_log(p: tf.Tensor) -> tf.Tensor:
    return tf.math.log(tf.where(p > 0, p, tf.ones_like(p)))


def categorical_entropy(probs: tf.Tensor) -> tf.Tensor:
    """`-sum_a p(a) ln p(a)` over the last axis (0 ln 0 = 0), in nats.

    Example:

    >>> float(categorical_entropy(tf.constant([0.5, 0.5])))  # doctest: +ELLIPSIS
    0.6931...
    """
    return -tf.reduce_sum(probs * _safe_log(probs), axis=-1)


def categorical_kl(before: tf.Tensor, after: tf.Tensor) -> tf.Tensor:
    """`KL(before || after) = sum_a p(a) (ln p(a) - ln q(a))`, last axis.

    Infinite where `after` gives 0 to an action `before` can take.
    """
    log_ratio = _safe_log(before) - tf.math.log(after)
    terms = tf.where(before > 0, before * log_ratio, tf.zeros_like(before))
    return tf.reduce_sum(terms, axis=-1)


def approx_kl(log_ratio: tf.Tensor, weights: tf.Tensor | None = None) -> tf.Tensor:
    """The approximate KL of SB3 and CleanRL: `mean((r - 1) - ln r)`.

    `r = pi_after(a) / pi_before(a)` for actions `a` drawn from
    `pi_before`, given as `ln r`. Each term is >= 0 and the mean is an
    unbiased estimate of `KL(before || after)` (Schulman's k3).
    """
    ratio_terms = tf.math.expm1(log_ratio) - log_ratio
    return weighted_mean(ratio_terms, weights)


def epsilon_greedy_probs(
    greedy_logits: tf.Tensor, epsilon: Any, allowed: tf.Tensor | None = None
) -> tf.Tensor:
    """The action distribution of epsilon-greedy: `(1 - eps) * onehot(argmax)
    + eps * uniform(allowed actions)`, over the last axis.

    Args:
        greedy_logits: The greedy policy's logits (Q-values), `[..., n]`.
        epsilon: The exploration probability, a scalar.
        allowed: Optional `[..., n]` mask of the actions random exploration
            picks from (tf-agents' action constraint or exploration mask).
    """
    n = tf.shape(greedy_logits)[-1]
    greedy = tf.one_hot(tf.argmax(greedy_logits, axis=-1), n, dtype=tf.float32)
    if allowed is None:
        allowed = tf.ones_like(greedy)
    allowed = tf.cast(tf.broadcast_to(allowed, tf.shape(greedy)), tf.float32)
    uniform = allowed / tf.reduce_sum(allowed, axis=-1, keepdims=True)
    epsilon = tf.cast(epsilon, tf.float32)
    return (1.0 - epsilon) * greedy + epsilon * uniform


def explained_variance(
    predicted: tf.Tensor, target: tf.Tensor, weights: tf.Tensor | None = None
) -> tf.Tensor:
    """`1 - Var(target - predicted) / Var(target)`; NaN when `Var(target)`
    is 0. 1 is a perfect value head, 0 no better than a constant, < 0 worse.
    """
    target = tf.cast(target, tf.float32)
    error = target - tf.cast(predicted, tf.float32)

    def variance(x: tf.Tensor) -> tf.Tensor:
        mean = weighted_mean(x, weights)
        return weighted_mean(tf.square(x - mean), weights)

    return 1.0 - variance(error) / variance(target)


def entropy_of(distribution: Any, outer_rank: int) -> tf.Tensor:
    """Entropy per outer element of a (nested) distribution, in nats.

    Analytic where tfp has it; otherwise `-mean(ln pi(a))` over
    `ENTROPY_SAMPLES` samples. Leaves are independent: their entropies add.
    """
    import tensorflow_probability as tfp

    total = []
    for leaf in tf.nest.flatten(distribution):
        try:
            if isinstance(leaf, tfp.distributions.Categorical):  # 0 ln 0 = 0
                entropy = categorical_entropy(leaf.probs_parameter())
            else:
                entropy = leaf.entropy()
        except NotImplementedError:
            samples = leaf.sample(ENTROPY_SAMPLES)
            entropy = -tf.reduce_mean(leaf.log_prob(samples), axis=0)
        entropy = tf.cast(entropy, tf.float32)
        rank = entropy.shape.rank
        total.append(tf.reduce_sum(entropy, axis=list(range(outer_rank, rank))))
    return tf.add_n(total)


def max_entropy(action_spec: Any) -> float | None:
    """`sum ln(number of actions)` over the discrete action elements, or
    None when an action is continuous (no maximum).

    Example:

    >>> from tf_agents.specs import tensor_spec  # doctest: +SKIP
    >>> max_entropy(tensor_spec.BoundedTensorSpec([], tf.int64, 0, 3))  # doctest: +SKIP
    1.3862943611198906
    """
    total = 0.0
    for spec in tf.nest.flatten(action_spec):
        if not spec.dtype.is_integer:
            return None
        counts = np.asarray(spec.maximum) - np.asarray(spec.minimum) + 1
        counts = np.broadcast_to(counts, tuple(spec.shape.as_list()))
        total += float(np.sum(np.log(counts.astype(np.float64))))
    return total
