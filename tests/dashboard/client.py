"""The dashboard's routes through TensorBoard's own WSGI app over real
event files, for the tests of every session (TensorFlow's, JAX's, the
tf-agents one): no TensorFlow is imported here."""

from __future__ import annotations

import argparse
import urllib.parse

#: Where TensorBoard serves the plugin's routes.
PREFIX = "/data/plugin/keras_gradmon/"


def plugin_client(log_dir, samples_per_plugin: dict[str, int] | None = None):
    """A werkzeug client of TensorBoard's WSGI app serving the plugin over a
    multiplexer of `log_dir`, sampled as `--samples_per_plugin` (a dict)
    and the loader's `fix_flags` say, as `tensorboard` itself does."""
    from tensorboard.backend import application
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from keras_gradmon.dashboard.plugin import GradmonLoader

    flags = argparse.Namespace(samples_per_plugin=dict(samples_per_plugin or {}))
    loader = GradmonLoader()
    loader.fix_flags(flags)
    # TensorBoard's defaults under the flags (`data_ingester` does the same).
    sizes = {"scalars": 1000, "histograms": 500, **flags.samples_per_plugin}
    multiplexer = pem.EventMultiplexer(tensor_size_guidance=sizes)
    multiplexer.AddRunsFromDirectory(str(log_dir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(log_dir))
    context = base_plugin.TBContext(
        data_provider=provider,
        logdir=str(log_dir),
        sampling_hints=flags.samples_per_plugin,
    )
    app = application.TensorBoardWSGI([loader.load(context)], data_provider=provider)
    return Client(app)


def get(client, route: str, **query: str) -> tuple[int, dict]:
    """`(status code, JSON body)` of one route."""
    response = client.get(PREFIX + route + "?" + urllib.parse.urlencode(query))
    return response.status_code, response.get_json()


def alerting_fit(log_dir: str, samples: int, every: int, epochs: int) -> int:
    """A monitored `fit` of a tiny MLP, batches of 16: statistics every
    step, histograms and activations every `every` steps, and a threshold
    rule under the run's gradient norms, so that alerts fire. Returns how
    many fired."""
    import keras

    from keras_gradmon import (
        ActivationMonitorCallback,
        GradientMonitorCallback,
        GradientMonitorOptimizer,
    )
    from keras_gradmon.alerts import ThresholdRule
    from keras_gradmon.alerts.delivery import AlertOptions
    from tests.helpers import LOSS, data, mlp

    x, y = data(samples)
    model = mlp()
    optimizer = GradientMonitorOptimizer(
        keras.optimizers.SGD(0.1), every_n_steps=1, histogram_every_n_steps=every
    )
    model.compile(optimizer, LOSS)
    rule = ThresholdRule(warning=0.5, critical=1.0, critical_patience=1)
    alerts = GradientMonitorCallback(log_dir, alerts=AlertOptions(rules=[rule]))
    probe = x[:32]
    activations = ActivationMonitorCallback(probe, log_dir=log_dir, every_n_steps=every)
    model.fit(
        x, y, batch_size=16, epochs=epochs, verbose=0, callbacks=[alerts, activations]
    )
    return len(alerts.alerts)
