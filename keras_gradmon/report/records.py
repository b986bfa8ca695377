"""The records of a TFRecord (event) file, with every checksum verified, and
what is wrong with a damaged one.

TensorBoard's reader stops at the first damaged record without a word (a
truncated last record, garbled bytes), so a report built on it can miss the
end of a run silently. This reader walks the framing itself (length, masked
CRC-32C of the length, data, masked CRC-32C of the data), keeps every intact
record and says what it found: where the damage starts and what was read
before it. It needs no TensorFlow.

CRC-32C (Castagnoli) of many byte ranges at once, in NumPy: checking records
byte by byte in Python runs at a few MB/s; here every record is cut into
chunks of `CHUNK` bytes, aligned on the record's end, the chunks are
processed side by side (one vectorized table lookup per byte column), and
each record's chunk registers are folded together with the "append `CHUNK`
zero bytes" operator, which is linear.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

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


_POLY = 0x82F63B78  # CRC-32C, reflected
CHUNK = 256
_ALL = 0xFFFFFFFF
_MASK_DELTA = 0xA282EAD8


def _byte_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1)
    return table.astype(np.uint32)


_TABLE = _byte_table()


def _feed_zeros(registers: np.ndarray, count: int) -> np.ndarray:
    for _ in range(count):
        registers = _TABLE[registers & 0xFF] ^ (registers >> 8)
    return registers


def _shift_tables() -> np.ndarray:
    """`[4, 256]`: the zero-feed operator of `CHUNK` bytes, by register byte."""
    values = np.arange(256, dtype=np.uint32)
    return np.stack([_feed_zeros(values << (8 * b), CHUNK) for b in range(4)])


_SHIFT = _shift_tables()


def _shift(registers: np.ndarray) -> np.ndarray:
    return (
        _SHIFT[0][registers & 0xFF]
        ^ _SHIFT[1][(registers >> 8) & 0xFF]
        ^ _SHIFT[2][(registers >> 16) & 0xFF]
        ^ _SHIFT[3][registers >> 24]
    )


def crc32c(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC-32C of each `data[start:start + length]`.

    Args:
        data: The bytes, a `uint8` array.
        starts: `int64` start offsets.
        lengths: `int64` lengths (0 allowed).

    Returns:
        A `uint32` array of checksums, one per range.

    Example:

    >>> data = np.frombuffer(b"123456789", np.uint8)
    >>> hex(int(crc32c(data, np.array([0]), np.array([9]))[0]))
    '0xe3069283'
    """
    starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
    if starts.size == 0:
        return np.zeros(0, np.uint32)
    full = np.maximum(lengths - 1, 0) // CHUNK  # full chunks after the first
    head = lengths - full * CHUNK  # the first chunk: 0 < head <= CHUNK (or 0)
    first_row = np.concatenate([[0], np.cumsum(full + 1)[:-1]])
    rows = int(np.sum(full + 1))
    record = np.repeat(np.arange(starts.size), full + 1)
    index = np.arange(rows) - first_row[record]  # chunk index within its record
    is_head = index == 0
    row_start = np.where(
        is_head, starts[record], starts[record] + head[record] + (index - 1) * CHUNK
    )
    row_length = np.where(is_head, head[record], CHUNK)
    registers = np.where(is_head, np.uint32(_ALL), np.uint32(0)).astype(np.uint32)
    last = max(data.size - 1, 0)
    for column in range(int(row_length.max(initial=0))):
        active = column < row_length
        byte = data[np.minimum(row_start + column, last)].astype(np.uint32)
        updated = _TABLE[(registers ^ byte) & 0xFF] ^ (registers >> 8)
        registers = np.where(active, updated, registers)
    folded = registers[first_row].copy()
    for step in range(1, int(full.max(initial=0)) + 1):
        going = np.nonzero(full >= step)[0]
        folded[going] = _shift(folded[going]) ^ registers[first_row[going] + step]
    return folded ^ np.uint32(_ALL)


def masked(crc: np.ndarray) -> np.ndarray:
    """TFRecord's masking of a CRC: rotate right by 15, add a constant."""
    crc = np.asarray(crc, np.uint64)
    rotated = ((crc >> 15) | (crc << 17)) & _ALL
    return ((rotated + _MASK_DELTA) & _ALL).astype(np.uint32)


@dataclasses.dataclass
class FileDamage:
    """A damaged event file, and what was read from it.

    Attributes:
        damage: Where and what (`Damage`).
        events: Events read from the file.
        steps: `(first, last)` step of the summaries read, or None.
    """

    damage: Damage
    events: int
    steps: tuple[int, int] | None

    @property
    def message(self) -> str:
        """One paragraph naming the file, the problem and what was read."""
        d = self.damage
        read = f"{d.records_read} record(s), {self.events} event(s)"
        if self.steps is not None:
            read += f", steps {self.steps[0]} to {self.steps[1]}"
        tail = (
            "nothing after that point could be read"
            if d.truncated
            else "the records after it were read"
        )
        return (
            f"Damaged event file {d.path!r} ({d.size:,} bytes): {d.problem}, at "
            f"byte {d.offset:,}; {tail}. Read from it: {read}. TensorBoard "
            f"shows nothing of this file after byte {d.offset:,}."
        )
