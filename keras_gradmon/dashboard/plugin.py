"""The keras_gradmon dashboard inside TensorBoard: a dynamic plugin whose
routes (under `/data/plugin/keras_gradmon/`) serve its page and each run's
per-variable numbers, layer detail, alerts and health line as JSON.

Everything is read through `context.data_provider`; a request names runs,
variables and metrics only, each checked against what the provider lists
(anything else is a 4xx JSON error); no path from a request is opened. The
page's files are this package's own, served by fixed name.

TensorBoard finds the plugin through the `tensorboard_plugins` entry point
of the installed package (pyproject.toml), or through
`tensorboard.program.TensorBoard(plugins=[..., GradmonLoader()])`.

Example:

>>> from tensorboard import default, program  # doctest: +SKIP
>>> plugins = default.get_plugins() + [GradmonLoader()]  # doctest: +SKIP
>>> board = program.TensorBoard(plugins=plugins)  # doctest: +SKIP
>>> board.configure(logdir="logs")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import math
from importlib import resources
from typing import Any

import numpy as np
from tensorboard import plugin_util
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from keras_gradmon.columns import PLUGIN_NAME
from keras_gradmon.dashboard import reading
from keras_gradmon.dashboard.health import health, report_run
from keras_gradmon.report.analysis import layer_names, layer_of

logger = logging.getLogger(__name__)

#: Steps TensorBoard keeps per tag of the `keras_gradmon` plugin unless
#: `--samples_per_plugin` says otherwise: the heatmap's columns and the
#: alert records of a run.
SAMPLES = 1000
#: The page's files, by route.
_STATIC = {
    "/index.js": ("index.js", "text/javascript"),
    "/style.css": ("style.css", "text/css"),
}


class Refused(Exception):
    """A request the routes answer with a 4xx JSON error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def jsonable(value: Any) -> Any:
    """`value` with NumPy numbers as Python's and non-finite floats as the
    strings "NaN", "Infinity", "-Infinity" (JSON has no such numbers).

    Example:

    >>> jsonable({"a": [1.5, float("nan"), np.float32("-inf")]})
    {'a': [1.5, 'NaN', '-Infinity']}
    """
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
    return value


def checked_name(request: wrappers.Request, argument: str, known: Any) -> str:
    """The request's `argument`, if it is one of `known`.

    Raises:
        Refused: 400 if missing or holding "..", 404 if not known.
    """
    value = request.args.get(argument)
    if value is None:
        raise Refused(400, f"`{argument}` is required.")
    if ".." in value.replace("\\", "/").split("/"):
        raise Refused(400, f"`{argument}` may not hold '..'. Received: {value!r}")
    if value not in known:
        raise Refused(404, f"No such {argument}. Received: {value!r}")
    return value


def answer(handler: Any, request: wrappers.Request, source: Any) -> tuple[str, int]:
    """`(JSON text, status code)` of one route: its body, a 4xx error it
    refused with, or a 500 naming any other exception (logged with its
    traceback): never TensorBoard's HTML error page, which the page could
    not read (section 5 of issue 32: never a server error page).

    Example:

    >>> def broken(request, source):
    ...     raise RuntimeError("no such table")
    >>> request = wrappers.Request.from_values("/heatmap?run=a")
    >>> answer(broken, request, None)
    ('{"error": "/heatmap?run=a failed: RuntimeError: no such table"}', 500)
    """
    try:
        body, code = jsonable(handler(request, source)), 200
        return json.dumps(body, allow_nan=False), code
    except Refused as refused:
        return json.dumps({"error": str(refused)}), refused.code
    except Exception as error:  # every failure is answered, in JSON
        where = request.full_path.rstrip("?")
        logger.exception("keras_gradmon dashboard: %s failed", where)
        message = f"{where} failed: {type(error).__name__}: {error}"
        return json.dumps({"error": message}), 500


class GradmonPlugin(base_plugin.TBPlugin):
    """The keras_gradmon dashboard (see the module docstring)."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._provider = context.data_provider
        self._hints = dict(context.sampling_hints or {})
        self._samples = self._hints.get(PLUGIN_NAME, SAMPLES) or reading.ALL

    def get_plugin_apps(self) -> dict[str, Any]:
        apps = {route: self._serve_static for route in _STATIC}
        apps.update(
            {
                "/runs": self._serve(self._runs),
                "/heatmap": self._serve(self._heatmap),
                "/layer": self._serve(self._layer),
                "/health": self._serve(self._health),
            }
        )
        return apps

    def is_active(self) -> bool:
        return False  # active by `data_plugin_names`, where data is listed

    def data_plugin_names(self) -> tuple[str, ...]:
        """The plugins whose data the dashboard reads: its tables and
        alerts, and the scalars (old logs' per-variable numbers, the global
        norms): TensorBoard enables the tab where a run holds either."""
        return (PLUGIN_NAME, reading.SCALARS)

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js")

    @wrappers.Request.application
    def _serve_static(self, request: wrappers.Request) -> wrappers.Response:
        name, mimetype = _STATIC[request.path[request.path.rfind("/") :]]
        text = resources.files(__package__).joinpath("static", name).read_bytes()
        return http_util.Respond(request, text, mimetype)

    def _serve(self, handler: Any) -> Any:
        @wrappers.Request.application
        def app(request: wrappers.Request) -> wrappers.Response:
            source = reading.Source(
                self._provider,
                plugin_util.context(request.environ),
                plugin_util.experiment_id(request.environ),
                self._samples,
                self._hints,
            )
            text, code = answer(handler, request, source)
            return http_util.Respond(request, text, "application/json", code=code)

        return app

    def _runs(self, request: wrappers.Request, source: reading.Source) -> dict:
        del request
        return {"runs": source.runs(), "samples": self._samples}

    def _run(self, request: wrappers.Request, source: reading.Source) -> str:
        return checked_name(request, "run", set(source.runs()))

    def _grid(self, source: reading.Source, run: str) -> tuple:
        listing = reading.listing(source, run)
        return listing, reading.variable_grid(source, run, listing.scalars)

    def _heatmap(self, request: wrappers.Request, source: reading.Source) -> dict:
        run = self._run(request, source)
        metric = checked_name(request, "metric", reading.METRICS)
        _, grid = self._grid(source, run)
        values = np.where(grid.recorded[metric], grid.values[metric], np.nan)
        cells = [
            [v if ok else None for v, ok in zip(row, seen)]
            for row, seen in zip(values.tolist(), grid.recorded[metric].tolist())
        ]
        present = grid.recorded[metric]
        return {
            "run": run,
            "metric": metric,
            "rows": grid.rows,
            "steps": grid.steps,
            "values": cells,
            "source": grid.source,
            "unreadable": grid.unreadable,
            "recorded": int(present.sum()),
            "nonfinite": grid.nonfinite(metric),
            "metrics": [m for m in reading.METRICS if grid.recorded[m].any()],
            "samples": self._samples,
            "sample": reading.sample_note(source.sampled),
        }

    def _layer(self, request: wrappers.Request, source: reading.Source) -> dict:
        run = self._run(request, source)
        listing, grid = self._grid(source, run)
        variable = checked_name(request, "variable", set(grid.rows))
        row = grid.rows.index(variable)
        series = {
            metric: {
                "steps": [
                    s for s, ok in zip(grid.steps, grid.recorded[metric][row]) if ok
                ],
                "values": grid.values[metric][row][grid.recorded[metric][row]],
            }
            for metric in reading.METRICS
            if grid.recorded[metric][row].any()
        }
        histogram = f"{reading.GRAD_HIST}/{variable}"
        return {
            "run": run,
            "variable": variable,
            "series": series,
            "histograms": reading.histogram_series(source, run, histogram)
            if histogram in listing.histograms
            else [],
            "activations": _activations(source, run, listing, grid, variable),
        }

    def _health(self, request: wrappers.Request, source: reading.Source) -> dict:
        run = self._run(request, source)
        listing, grid = self._grid(source, run)
        alerts = reading.read_alerts(source, run)
        found = health(report_run(source, run, listing, grid, alerts))
        found.update(
            run=run,
            unreadable_alerts=alerts.unreadable,
            unreadable_tables=grid.unreadable,
            nonfinite_cells=grid.nonfinite(),
            steps=[grid.steps[0], grid.steps[-1]] if grid.steps else None,
            nothing_to_draw=None
            if grid.rows or found["reports"] or alerts.records
            else nothing_to_draw(listing),
            sample=reading.sample_note(source.sampled),
        )
        return found


def nothing_to_draw(listing: reading.Listing) -> str:
    """What the page says of a run without keras_gradmon data it can draw,
    naming what the run holds instead.

    Example:

    >>> nothing_to_draw(reading.Listing(["epoch_loss"], []))  # doctest: +ELLIPSIS
    'This run holds no keras_gradmon data the dashboard can draw (...); it holds 1 other scalar tag(s) (epoch_loss) and 0 histogram tag(s).'
    """  # noqa: E501
    more = ", ..." if len(listing.scalars) > 5 else ""
    shown = ", ".join(listing.scalars[:5]) + more
    return (
        "This run holds no keras_gradmon data the dashboard can draw (no "
        "per-variable numbers, no gradient norms, no RL health signals, no "
        f"alerts); it holds {len(listing.scalars)} other scalar tag(s)"
        + (f" ({shown})" if listing.scalars else "")
        + f" and {len(listing.histograms)} histogram tag(s)."
    )


def _activations(
    source: reading.Source,
    run: str,
    listing: reading.Listing,
    grid: reading.Grid,
    variable: str,
) -> dict[str, dict]:
    """`{statistic: {"steps", "values"}}` of the activations of the layer
    `variable` belongs to (`activation_<stat>/<layer>`, the layer's name
    matched to the variable paths' layers as the report matches them)."""
    tags = [t for t in listing.scalars if t.startswith(reading.ACTIVATION)]
    names = {t.partition("/")[2] for t in tags}
    mapped = layer_names(names, {layer_of(row) for row in grid.rows})
    layer = layer_of(variable)
    mine = [n for n in names if mapped.get(n, n) == layer]
    wanted = [t for t in tags if t.partition("/")[2] in mine]
    return {
        tag.partition("/")[0][len(reading.ACTIVATION) :]: {
            "steps": sorted(points),
            "values": [points[s] for s in sorted(points)],
        }
        for tag, points in source.scalars(run, wanted).items()
    }


class GradmonLoader(base_plugin.TBLoader):
    """Loads `GradmonPlugin`, and has TensorBoard keep up to `SAMPLES` steps
    per tag of the `keras_gradmon` plugin where `--samples_per_plugin` does
    not name it: TensorBoard keeps 10 of a plugin it does not know. No
    other plugin's sampling is changed (the legacy `alert_log` texts of old
    logs keep the text plugin's 10 steps per tag unless
    `--samples_per_plugin text=...` says more).

    Example:

    >>> import argparse
    >>> flags = argparse.Namespace(samples_per_plugin={"text": 50})
    >>> GradmonLoader().fix_flags(flags)
    >>> flags.samples_per_plugin
    {'text': 50, 'keras_gradmon': 1000}
    >>> flags = argparse.Namespace(samples_per_plugin="")
    >>> GradmonLoader().fix_flags(flags)
    >>> flags.samples_per_plugin
    {'keras_gradmon': 1000}
    """

    def fix_flags(self, flags: Any) -> None:
        hints = getattr(flags, "samples_per_plugin", None)
        if isinstance(hints, str):  # given to `configure` unparsed
            pairs = (p.split("=") for p in hints.split(",") if p.strip())
            hints = {k.strip(): int(v) for k, v in pairs}
        hints = dict(hints or {})
        hints.setdefault(PLUGIN_NAME, SAMPLES)
        flags.samples_per_plugin = hints

    def load(self, context: base_plugin.TBContext) -> GradmonPlugin:
        return GradmonPlugin(context)
