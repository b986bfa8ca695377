"""Several optimizer steps per batch (a WGAN-GP's critic steps, an n-critic
loop): every recorded step reaches the recorders and the alert rules, and
Keras `logs` hold the batch's own value."""

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_gradmon
from keras_gradmon import GradientMonitorOptimizer, GradientSummaryCallback
from keras_gradmon.alerts import ThresholdRule
from tests.reference import histogram_series, load_events, scalar_series

CRITIC_STEPS = 3
BATCHES = 4
BATCH = 8


class CriticGan(keras.Model):
    """A small WGAN-GP-style model: `CRITIC_STEPS` critic updates (with a
    gradient penalty) per generator update, each critic step's global
    gradient norm kept by the model itself as the reference."""

    def __init__(self, critic_optimizer, generator_optimizer, steps: int):
        super().__init__()
        keras.utils.set_random_seed(0)
        self.generator = keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(8, activation="relu"),
                keras.layers.Dense(6),
            ],
            name="generator",
        )
        self.critic = keras.Sequential(
            [
                keras.Input((6,)),
                keras.layers.Dense(8, activation="relu", name="hidden"),
                keras.layers.Dense(1, name="score"),
            ],
            name="critic",
        )
        self.c_opt, self.g_opt = critic_optimizer, generator_optimizer
        self.norms = tf.Variable(tf.fill([steps], np.nan), trainable=False)
        self.applied = tf.Variable(0, dtype=tf.int64, trainable=False)

    def _critic_step(self, real, noise):
        with tf.GradientTape() as tape:
            fake = self.generator(noise)
            wasserstein = tf.reduce_mean(self.critic(fake)) - tf.reduce_mean(
                self.critic(real)
            )
            alpha = tf.random.uniform([tf.shape(real)[0], 1], seed=1)
            mixed = alpha * real + (1 - alpha) * fake
            with tf.GradientTape() as inner:
                inner.watch(mixed)
                score = self.critic(mixed)
            slopes = tf.norm(inner.gradient(score, mixed), axis=1)
            loss = wasserstein + 10.0 * tf.reduce_mean((slopes - 1.0) ** 2)
        grads = tape.gradient(loss, self.critic.trainable_variables)
        self.norms.scatter_nd_update([[self.applied]], [tf.linalg.global_norm(grads)])
        self.applied.assign_add(1)
        self.c_opt.apply_gradients(zip(grads, self.critic.trainable_variables))
        return loss

    def train_step(self, real):
        noise = tf.random.normal([tf.shape(real)[0], 4], seed=2)
        for _ in range(CRITIC_STEPS):
            c_loss = self._critic_step(real, noise)
        with tf.GradientTape() as tape:
            g_loss = -tf.reduce_mean(self.critic(self.generator(noise)))
        grads = tape.gradient(g_loss, self.generator.trainable_variables)
        self.g_opt.apply_gradients(zip(grads, self.generator.trainable_variables))
        return {"c_loss": c_loss, "g_loss": g_loss}


def _real():
    return np.random.default_rng(0).normal(size=(BATCHES * BATCH, 6)).astype("f4")


def _fit_gan(callbacks, **options):
    critic_opt = GradientMonitorOptimizer(
        keras.optimizers.Adam(1e-3), every_n_steps=1, **options
    )
    gan = CriticGan(critic_opt, keras.optimizers.Adam(1e-3), BATCHES * CRITIC_STEPS)
    gan.compile()
    made = [make(critic_opt) for make in callbacks]
    gan.fit(
        _real(), batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=made
    )
    return gan, made


def test_three_applies_per_batch_write_every_step(alerted):
    gan, log_dir = alerted["gan"], alerted["log_dir"]
    events = load_events(log_dir)
    norms = scalar_series(events, "grad_norm/global")
    steps = list(range(BATCHES * CRITIC_STEPS))
    assert sorted(norms) == steps
    np.testing.assert_allclose([norms[s] for s in steps], gan.norms.numpy(), rtol=1e-5)
    histograms = histogram_series(events, "grad_hist/critic/hidden/kernel")
    assert sorted(histograms) == steps


def test_a_history_too_small_is_reported_and_counted(tmp_path, caplog):
    log_dir = str(tmp_path / "critic")
    with caplog.at_level(logging.WARNING, logger="keras_gradmon"):
        gan, made = _fit_gan(
            [lambda opt: GradientSummaryCallback(log_dir, optimizer=opt)],
            summary_history=2,
        )
    warnings = [r for r in caplog.records if "summary_history" in r.getMessage()]
    assert len(warnings) == 1  # said once, naming the option
    # Each batch records 3 summaries; the state keeps 2: one lost a batch.
    assert made[0].monitor_writer.dropped["summaries"] == BATCHES
    events = load_events(log_dir)
    written = scalar_series(events, "grad_norm/global")
    kept = [b * CRITIC_STEPS + k for b in range(BATCHES) for k in (1, 2)]
    assert sorted(written) == kept
    np.testing.assert_allclose(
        [written[s] for s in kept], gan.norms.numpy()[kept], rtol=1e-5
    )
    dropped = scalar_series(events, "dropped/summaries")
    assert dropped == {b * CRITIC_STEPS + 1: float(b + 1) for b in range(BATCHES)}


class _AlertSteps(keras.callbacks.Callback):
    """After each batch, the newest step the alert rules have seen."""

    def __init__(self, alert_callback):
        super().__init__()
        self.alert_callback = alert_callback
        self.newest = []

    def on_train_batch_end(self, batch, logs=None):
        steps = [a.step for a in self.alert_callback.alerts]
        self.newest.append(max(steps, default=-1))


@pytest.fixture(scope="module")
def alerted(tmp_path_factory):
    """One fit (every step due, histograms too) written to `log_dir`, with
    an alert rule that fires on every summary, and a reader of the newest
    step alerted after each batch."""
    made = {"log_dir": str(tmp_path_factory.mktemp("critic"))}

    def summary_for(optimizer):
        return GradientSummaryCallback(made["log_dir"], optimizer=optimizer)

    def alert_for(optimizer):
        rules = {"any": ThresholdRule(warning=1e-30)}
        made["alert"] = keras_gradmon.GradientAlertCallback(rules, optimizer=optimizer)
        return made["alert"]

    def reader_for(optimizer):
        made["reader"] = _AlertSteps(made["alert"])
        return made["reader"]

    made["gan"], _ = _fit_gan(
        [summary_for, alert_for, reader_for], histogram_every_n_steps=1
    )
    return made


def test_alert_rules_see_every_step(alerted):
    fired = sorted({a.step for a in alerted["alert"].alerts if a.subject == "global"})
    assert fired == list(range(BATCHES * CRITIC_STEPS))


def test_custom_loop_with_three_applies_writes_every_step(tmp_path):
    keras.utils.set_random_seed(0)
    variable = keras.Variable(np.ones(3, "f4"), name="w")
    optimizer = GradientMonitorOptimizer(keras.optimizers.SGD(0.1), every_n_steps=1)

    @tf.function
    def step(scale):
        for k in range(3):
            optimizer.apply_gradients([(scale * (k + 1) * tf.ones(3), variable)])

    writer = tf.summary.create_file_writer(str(tmp_path))
    for batch in range(2):
        step(tf.constant(float(batch + 1)))
        assert keras_gradmon.write_summaries(optimizer, writer)
    writer.flush()
    norms = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    expected = {
        3 * b + k: (b + 1) * (k + 1) * np.sqrt(3.0) for b in range(2) for k in range(3)
    }
    assert sorted(norms) == sorted(expected)
    for s, value in expected.items():
        np.testing.assert_allclose(norms[s], value, rtol=1e-6)


class _LogsReader(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(logs["grad_norm"])


def test_logs_hold_the_batch_own_value(tmp_path):
    # Every 2 steps: due batches (their own value) and the others.
    every = 2
    from tests.helpers import LOSS, data, mlp

    x, y = data(n=64)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.05), every_n_steps=every
    )
    model.compile(optimizer, LOSS)
    reader = _LogsReader()
    log_dir = str(tmp_path / "g")
    model.fit(
        x,
        y,
        batch_size=8,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[GradientSummaryCallback(log_dir), reader],
    )
    norms = scalar_series(load_events(log_dir), "grad_norm/global")
    # Due batches hold their own value; the others keep the last one.
    expected = [norms[b - b % every] for b in range(8)]
    np.testing.assert_array_equal(np.float32(reader.seen), np.float32(expected))


def test_custom_train_step_callback_says_to_pass_the_optimizer(tmp_path):
    monitored = GradientMonitorOptimizer(keras.optimizers.SGD(0.1))

    class Custom(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((self(x) - y) ** 2)
            variables = self.trainable_variables
            monitored.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return {"loss": loss}

    model = Custom()
    model.compile()  # Keras makes an RMSprop of its own
    x, y = np.ones((8, 2), "f4"), np.ones((8, 1), "f4")
    with pytest.raises(ValueError, match=r"optimizer=my_monitored_optimizer"):
        model.fit(x, y, verbose=0, callbacks=[GradientSummaryCallback(str(tmp_path))])
    model.fit(
        x,
        y,
        verbose=0,
        callbacks=[GradientSummaryCallback(str(tmp_path), optimizer=monitored)],
    )
    norms = scalar_series(load_events(str(tmp_path)), "grad_norm/global")
    assert 0 in norms


def test_alert_rules_see_each_batch_steps_at_its_end(alerted):
    # Batch b applies steps 3b..3b+2, each due: all are checked at its end,
    # not later (a batch late would give [-1, 2, 5, 8]).
    assert alerted["reader"].newest == [3 * b + 2 for b in range(BATCHES)]
