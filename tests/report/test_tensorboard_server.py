"""A real TensorBoard server serves our tags through its HTTP data API."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

from tests.reference import histogram_series, load_events, scalar_series
from tests.tensorboard_process import serve, stop

RUN = "clipping/train"
DEADLINE_S = 90


def _get(port: int, path: str, **query: str):
    url = f"http://127.0.0.1:{port}{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def server(demo_logs):
    """TensorBoard on a free port of 127.0.0.1; yields the port."""
    process, port = serve(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(demo_logs),
         "--host", "127.0.0.1", "--port", "0", "--load_fast", "false"]
    )
    try:
        yield port
    finally:
        stop(process)


def _wait_for_tags(port: int, plugin: str, tag: str) -> dict:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            tags = _get(port, f"/data/plugin/{plugin}/tags")
            if tag in tags.get(RUN, {}):
                return tags
        except (urllib.error.URLError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"TensorBoard did not serve {plugin} tag {tag!r} in time")
        time.sleep(0.5)


def test_tensorboard_serves_our_scalars_and_histograms(server, demo_logs):
    events = load_events(str(demo_logs / "clipping" / "train"))
    scalar_tags = _wait_for_tags(server, "scalars", "grad_norm/global")[RUN]
    tags = ("grad_norm/hidden", "clip/fraction", "activation_std/demo_mlp/hidden_1")
    for tag in tags:
        assert tag in scalar_tags
    served = _get(
        server, "/data/plugin/scalars/scalars", run=RUN, tag="grad_norm/global"
    )
    expected = scalar_series(events, "grad_norm/global")
    assert {step: value for _, step, value in served} == pytest.approx(expected)

    histogram_tags = _wait_for_tags(
        server, "histograms", "grad_hist/demo_mlp/head/bias"
    )
    assert "activation_hist/demo_mlp/hidden_2" in histogram_tags[RUN]
    served = _get(
        server,
        "/data/plugin/histograms/histograms",
        run=RUN,
        tag="grad_hist/demo_mlp/hidden_1/kernel",
    )
    expected = histogram_series(events, "grad_hist/demo_mlp/hidden_1/kernel")
    assert [step for _, step, _ in served] == sorted(expected)
    for _, step, buckets in served:
        np.testing.assert_allclose(np.array(buckets), expected[step], rtol=1e-6)
