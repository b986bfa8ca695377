"""The records of a TFRecord (event) file, with every checksum verified.

TensorBoard's reader stops at the first damaged record without a word (a
truncated last record, garbled bytes), so a report built on it can miss the
end of a run silently. This reader walks the framing itself (length, masked
CRC-32C of the length, data, masked CRC-32C of the data), keeps every intact
record and says what it found: where the damage starts and what was read
before it. It needs no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

from keras_gradmon.report.crc32c import crc32c, masked

_HEADER = 12  # uint64 length + uint32 masked CRC of the length
_FOOTER = 4  # uint32 masked CRC of the data


@dataclasses.dataclass(frozen=True)
class Damage:
    """What is wrong with one event file.

    Attributes:
        path: The file.
        size: Its size in bytes.
        offset: The byte where the first problem starts.
        problem: What it is, e.g. "the last record is cut short".
        records_read: Intact records read from the file.
        skipped: Records whose data failed its checksum (skipped: their
            length was intact, so the records after them were still read).
        truncated: Whether reading stopped before the end of the file.
    """

    path: str
    size: int
    offset: int
    problem: str
    records_read: int
    skipped: int
    truncated: bool


@dataclasses.dataclass
class _Walk:
    starts: list[int]
    lengths: list[int]
    problem: str | None = None
    offset: int = 0


def _header_ok(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Whether each record's length matches its masked CRC."""
    computed = masked(crc32c(data, starts, np.full(starts.size, 8)))
    return computed == _stored(data, starts + 8)


def _walk(raw: bytes, data: np.ndarray) -> _Walk:
    """Offsets and lengths of the records whose framing fits in the file."""
    walk, offset, size = _Walk([], []), 0, len(raw)
    while offset < size:
        walk.offset = offset
        if size - offset < _HEADER:
            walk.problem = "the file ends inside a record's header (cut short)"
            return walk
        (length,) = struct.unpack_from("<Q", raw, offset)
        if offset + _HEADER + length + _FOOTER > size:
            if _header_ok(data, np.array([offset]))[0]:
                walk.problem = "the last record is cut short"
            else:
                walk.problem = "a record's length is garbled (fails its checksum)"
            return walk
        walk.starts.append(offset)
        walk.lengths.append(length)
        offset += _HEADER + length + _FOOTER
    walk.offset = offset
    return walk


def _stored(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    raw = data[offsets[:, None] + np.arange(4)].astype(np.uint32)
    return raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16) | (raw[:, 3] << 24)


def read_records(path: str) -> tuple[list[bytes], Damage | None]:
    """The intact records of `path`, and what is damaged (None: nothing).

    A record whose length fails its checksum ends the reading (the framing
    after it cannot be trusted); a record whose data fails its checksum is
    skipped and the reading goes on.

    Example:

    >>> records, damage = read_records("logs/events.out.tfevents.1")  # doctest: +SKIP
    """
    with open(path, "rb") as file:
        raw = file.read()
    data = np.frombuffer(raw, np.uint8)
    walk = _walk(raw, data)
    starts = np.array(walk.starts, np.int64)
    lengths = np.array(walk.lengths, np.int64)
    header_ok = _header_ok(data, starts)
    if not header_ok.all():
        first = int(np.argmin(header_ok))
        walk.problem = "a record's length is garbled (fails its checksum)"
        walk.offset = int(starts[first])
        starts, lengths = starts[:first], lengths[:first]
    data_ok = masked(crc32c(data, starts + _HEADER, lengths)) == _stored(
        data, starts + _HEADER + lengths
    )
    records = [
        raw[s + _HEADER : s + _HEADER + n]
        for s, n, ok in zip(starts.tolist(), lengths.tolist(), data_ok.tolist())
        if ok
    ]
    skipped = int(np.sum(~data_ok))
    if walk.problem is None and not skipped:
        return records, None
    problem, offset = walk.problem, walk.offset
    if skipped:
        first = int(np.argmin(data_ok))
        garbled = f"{skipped} record(s) fail their checksum (garbled bytes), skipped"
        problem = garbled if problem is None else f"{garbled}; then {problem}"
        offset = int(starts[first])
    damage = Damage(
        path=path,
        size=len(raw),
        offset=offset,
        problem=problem,
        records_read=len(records),
        skipped=skipped,
        truncated=walk.problem is not None,
    )
    return records, damage
