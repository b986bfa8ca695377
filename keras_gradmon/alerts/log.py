"""How alerts are kept in a TensorBoard event file, and read back.

Each step that raised alerts gets, under every tag scope, two summaries in
one event: a Markdown table for TensorBoard's Text tab (`alert_log/all`,
`alert_log/<scope>/all`: `alerts_markdown`) and the records themselves, a
1-D string tensor of one JSON object (`Alert.to_dict()`) per alert, under
`alerts_tag(scope)` (`keras_gradmon/alerts`, `keras_gradmon/<scope>/alerts`),
plugin `keras_gradmon` with `alerts_content(scope)` in its first event's
metadata, so that it stays out of the Text tab. A monitor of another kind
than the gradients' writes its table under its own tag
(`AlertBatch.markdown_tag`: `alert_log/activations`), so that a gradient
monitor and an activation monitor with their own event files in one
directory both show in the Text tab. Within one event file both tags hold
every alert of their step written so far: TensorBoard keeps the last event
of a step.

`keras-gradmon report` and the dashboard read the records with
`decode_alerts` and unite the events of a step with `merge_alerts`: two
event files (two recorders) writing alerts at one step both count, and the
alerts one recorder repeats in a later event of a step count once. No
TensorFlow here.

Example:

>>> import numpy as np
>>> from keras_gradmon.alerts.events import ALERT_LOG, Alert
>>> alert = Alert("spike", "warning", 7, 3.5, 2.0, "global")
>>> value = np.array([json.dumps(alert.to_dict()).encode()], dtype=object)
>>> (record,) = decode_alerts(alerts_content("actor"), value)
>>> record["rule"], record["scope"], alerts_tag("actor")
('spike', 'actor', 'keras_gradmon/actor/alerts')
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from keras_gradmon.alerts.events import ALERT_LOG, Alert
from keras_gradmon.columns import PLUGIN_NAME, tag
from keras_gradmon.formatting import format_number
from keras_gradmon.hub import GRADIENTS

__all__ = [
    "ALERTS_KIND",
    "AlertBatch",
    "alerts_content",
    "alerts_markdown",
    "alerts_tag",
    "decode_alerts",
    "merge_alerts",
]

#: The `kind` of the alerts' plugin content (a table's is "variables").
ALERTS_KIND = "alerts"
#: The versions of the alerts' records `decode_alerts` reads.
_VERSIONS = (1,)
#: Written as a backslash escape in a Markdown table cell: Markdown's own
#: marks, and `|`, which would end the cell.
_MARKS = frozenset("\\`*_[]|")
#: Written as HTML entities: TensorBoard's sanitizer would drop a tag.
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_COLUMNS = ("tier", "rule", "subject", "value", "threshold", "hint")


def alerts_tag(scope: str | None) -> str:
    """The tag of the alert records under the tag scope `scope`.

    Example:

    >>> alerts_tag(None), alerts_tag("rl")
    ('keras_gradmon/alerts', 'keras_gradmon/rl/alerts')
    """
    return tag(PLUGIN_NAME, ALERTS_KIND, scope)


def alerts_content(scope: str | None) -> bytes:
    """The plugin content of the alert records' summary metadata.

    Example:

    >>> alerts_content(None)
    b'{"kind": "alerts", "version": 1, "scope": null}'
    """
    return json.dumps({"kind": ALERTS_KIND, "version": 1, "scope": scope}).encode()


def decode_alerts(content: bytes, value: np.ndarray) -> list[dict]:
    """The alerts of one event of an alerts tag: `content` is the plugin
    content of the tag's metadata, `value` its tensor (JSON strings).

    Returns:
        Each alert as `Alert.to_dict()` gave it, plus "scope" (the tag
        scope, or None).

    Raises:
        ValueError: `content` is not an alerts record of a version read
            here, or an element of `value` is not an alert's JSON object.

    Example:

    >>> decode_alerts(b'{"kind": "x"}', np.array([]))
    Traceback (most recent call last):
    ...
    ValueError: not keras_gradmon alerts (kind "alerts", version 1): b'{"kind": "x"}'
    """
    try:
        names = json.loads(content)
        known = names["kind"] == ALERTS_KIND and names["version"] in _VERSIONS
        scope = names.get("scope")
    except (ValueError, KeyError, TypeError):
        known = False
    if not known:
        raise ValueError(
            f'not keras_gradmon alerts (kind "{ALERTS_KIND}", version '
            f"{', '.join(map(str, _VERSIONS))}): {content[:80]!r}"
        )
    return [{**_record(item), "scope": scope} for item in np.ravel(value)]


def merge_alerts(
    events: Iterable[tuple[int, Sequence[Mapping[str, Any]]]],
) -> list[dict]:
    """The alerts of events, each `(step, records)` (records as
    `decode_alerts` gives them), with the events of each step united.

    A record (the same content, "scope" included) counts as many times as
    the one event of its step that holds it most often: a later event of
    one recorder repeats the alerts of its step written before, and counts
    none of them twice; the records of two recorders at one step (an
    activation monitor with event files of its own beside the gradient
    monitor's) differ, and all count. The report and the dashboard both
    read alerts through this function.

    Returns:
        The records by step, in the order they first appear within a step.

    Example:

    >>> a, b, c = {"rule": "spike"}, {"rule": "dead"}, {"rule": "growth"}
    >>> merge_alerts([(5, [a]), (5, [a, b]), (5, [c]), (4, [a])])
    [{'rule': 'spike'}, {'rule': 'spike'}, {'rule': 'dead'}, {'rule': 'growth'}]
    """
    steps: dict[int, dict[str, list]] = {}
    for step, records in events:
        found = steps.setdefault(int(step), {})
        keys = [json.dumps(r, sort_keys=True, default=str) for r in records]
        for key, count in Counter(keys).items():
            if key not in found:
                found[key] = [records[keys.index(key)], count]
            else:
                found[key][1] = max(found[key][1], count)
    return [
        record
        for step in sorted(steps)
        for record, count in steps[step].values()
        for _ in range(count)
    ]


@dataclass(frozen=True)
class LegacyLines:
    """What a legacy alert log's text held: its alerts (each with the
    "scope" of its tag), lines that look like JSON but are no alert, and
    lines that are not UTF-8 (read with U+FFFD)."""

    alerts: list[dict]
    bad: int = 0
    garbled: int = 0


def legacy_alert_lines(tag: str, value: Any) -> LegacyLines:
    """The alerts of a legacy alert log (`alert_log/all`,
    `alert_log/<scope>/all` before the records tensor: a JSON object a
    line). Today's logs hold a Markdown table there, which is passed over.
    The report and the dashboard both read old logs through this.

    Example:

    >>> legacy_alert_lines("alert_log/rl/all",
    ...                    np.array([b'{"rule": "spike"}', b"| table |"])).alerts
    [{'rule': 'spike', 'scope': 'rl'}]
    """
    scope = "/".join(tag.split("/")[1:-1]) or None
    found, bad, garbled = [], 0, 0
    for element in np.ravel(value):
        try:
            text = element.decode() if isinstance(element, bytes) else str(element)
        except UnicodeDecodeError:
            garbled += 1
            text = element.decode("utf-8", "replace")
        for line in text.splitlines():
            if not line.lstrip().startswith("{"):
                continue
            try:
                alert = json.loads(line)
            except json.JSONDecodeError:
                alert = None
            if isinstance(alert, dict):
                found.append({**alert, "scope": scope})
            else:
                bad += 1
    return LegacyLines(found, bad, garbled)


def _record(item: Any) -> dict:
    """One element of an alerts tensor as its dict, checked to be an alert."""
    text = item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
    try:
        record = json.loads(text)
        Alert.from_dict(record)  # has every field an alert needs
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"not an alert's JSON object: {text[:80]!r}") from error
    return record


def alerts_markdown(alerts: Sequence[Mapping[str, Any]]) -> str:
    """The alerts as a Markdown table for TensorBoard's Text tab: one row
    per alert (tier, rule, subject, value, threshold, hint), under a line
    that counts them. The text of each cell is escaped: a `|` in a
    variable's name does not break the table.

    Args:
        alerts: `Alert.to_dict()` records (as `decode_alerts` returns them).

    Example:

    >>> alert = Alert("threshold", "critical", 300, 826256.0, 50000.0,
    ...               "actor|cnn", "lower the learning rate")
    >>> print(alerts_markdown([alert.to_dict()]))
    **1 alert at step 300**: 1 critical
    <BLANKLINE>
    | tier | rule | subject | value | threshold | hint |
    | --- | --- | --- | --- | --- | --- |
    | CRITICAL | gradient threshold | actor\\|cnn | 826,256 | &gt; 50,000 | lower the learning rate |
    """  # noqa: E501
    lines = [_heading(alerts), ""]
    lines.append("| " + " | ".join(_COLUMNS) + " |")
    lines.append("| " + " | ".join("---" for _ in _COLUMNS) + " |")
    for record in alerts:
        lines.append("| " + " | ".join(_escape(c) for c in _cells(record)) + " |")
    return "\n".join(lines)


def _heading(alerts: Sequence[Mapping[str, Any]]) -> str:
    """The line above the table: "**2 alerts at step 300**: 1 critical, 1
    warning"."""
    noun = "alert" if len(alerts) == 1 else "alerts"
    steps = {record.get("step") for record in alerts}
    where = f" at step {steps.pop()}" if len(steps) == 1 else ""
    tiers = [record.get("tier") for record in alerts]
    counts = [f"{tiers.count(t)} {t}" for t in dict.fromkeys(sorted(tiers, key=str))]
    return f"**{len(alerts)} {noun}{where}**: " + ", ".join(counts)


def _cells(record: Mapping[str, Any]) -> list[str]:
    """The row of one alert, in plain words."""
    alert = Alert.from_dict(record)
    subject = alert.subject
    listed = alert.details.get("subjects")
    if isinstance(listed, (list, tuple)) and len(listed) > 1:
        subject += f" and {len(listed) - 1} more"
    hint = alert.hint + (f" [{alert.note}]" if alert.note else "")
    threshold = f"{alert.comparison} {format_number(alert.threshold)}"
    tier = alert.tier.upper()
    return [tier, alert.title, subject, format_number(alert.value), threshold, hint]


def _escape(text: str) -> str:
    """`text` as the literal text of one Markdown table cell."""
    text = " ".join(text.split())  # a line break would end the row
    return "".join(_ENTITIES.get(c) or ("\\" + c if c in _MARKS else c) for c in text)


@dataclass(frozen=True)
class AlertBatch:
    """The alerts one delivery raised at one step, under one tag scope: what
    a hub hands to each recorder. A recorder with `write_alerts(batch,
    step)` (TensorBoard's: `keras_gradmon.alerts.log`) writes them its way;
    any other gets `write_text(batch.text_tag, batch.lines(), step)`, one
    JSON object (`Alert.to_dict`) per line.

    Attributes:
        alerts: The alerts, in the order they fired.
        scope: The tag scope they were raised under (None: none).
        source: The kind of monitor that raised them ("gradients",
            "activations", ...; None: unnamed), which names the tag of
            their Markdown table (`markdown_tag`).

    Example:

    >>> batch = AlertBatch((Alert("spike", "warning", 7, 3.5, 2.0, "global"),), "rl")
    >>> batch.text_tag, json.loads(batch.lines()[0])["rule"]
    ('alert_log/rl/all', 'spike')
    >>> AlertBatch(batch.alerts, None, "activations").markdown_tag
    'alert_log/activations'
    """

    alerts: tuple[Alert, ...]
    scope: str | None = None
    source: str | None = None

    @property
    def text_tag(self) -> str:
        """`alert_log/all`, or `alert_log/<scope>/all`."""
        return tag(ALERT_LOG, "all", self.scope)

    @property
    def markdown_tag(self) -> str:
        """The tag of the Markdown table: `text_tag` for the gradients' (or
        an unnamed source's) alerts, else `alert_log/[<scope>/]<source>`
        (`alert_log/activations`), so that two monitors writing alerts at
        one step into two event files of one directory both show in
        TensorBoard's Text tab, which shows one event a step and tag."""
        if self.source in (None, GRADIENTS):
            return self.text_tag
        return tag(ALERT_LOG, self.source, self.scope)

    def records(self) -> list[dict[str, Any]]:
        """Each alert as `Alert.to_dict()`."""
        return [alert.to_dict() for alert in self.alerts]

    @property
    def records_tag(self) -> str:
        """`keras_gradmon/alerts`, or `keras_gradmon/<scope>/alerts`."""
        return alerts_tag(self.scope)

    def content(self) -> bytes:
        """The plugin content of the records' tag (`alerts_content`)."""
        return alerts_content(self.scope)

    @staticmethod
    def markdown(records: Sequence[Mapping[str, Any]]) -> str:
        """The Markdown table of `records` (`alerts_markdown`)."""
        return alerts_markdown(records)

    def lines(self) -> list[str]:
        """Each alert as one line of JSON."""
        return [json.dumps(record) for record in self.records()]
