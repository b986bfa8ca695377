"""Reading a monitor config from a JSON or YAML file: the file's `monitor`
section (or the whole file), with errors that name the file."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any


def monitor_section(path: str) -> Mapping[str, Any]:
    """The monitor options in the file at `path`: its top-level `monitor`
    mapping when there is one (the rest of the file is left alone), else the
    whole file.

    Raises:
        ValueError: The file is not JSON/YAML, is empty, or holds no mapping;
            the message names the file.

    Example:

    >>> monitor_section("train.yaml")  # doctest: +SKIP
    {'every_n_steps': 10}
    """
    options = _read_config_file(path)
    if isinstance(options, Mapping) and "monitor" in options:
        options = options["monitor"]
    if not isinstance(options, Mapping):
        raise ValueError(
            f"The monitor config in {path!r} must be a mapping of options "
            "(or hold one under a top-level `monitor` key). Received: "
            f"{options!r}"
        )
    return options

def _read_config_file(path: str) -> Any:
    """The parsed contents of a JSON or YAML file; errors name the file."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise ValueError(
            f"A config file must end in .json, .yaml or .yml. Received: path={path!r}"
        )
    with open(path, encoding="utf-8") as file:
        text = file.read()
    if suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path!r} is not valid JSON: {error.msg} at line {error.lineno}, "
                f"column {error.colno}"
                + (" (the file is empty)" if not text.strip() else "")
            ) from None
    try:
        import yaml
    except ImportError:
        raise ValueError(
            "Reading a YAML config needs PyYAML: pip install "
            f"'keras-gradmon[yaml]'. Received: path={path!r}"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"{path!r} is not valid YAML: {error}") from None
