"""The records of a TFRecord (event) file, with every checksum verified, and
what is wrong with a damaged one.

TensorBoard's reader stops at the first damaged record without a word (a
truncated last record, garbled bytes), so a report built on it can miss the
end of a run silently. This reader walks the framing itself (length, masked
CRC-32C of the length, data, masked CRC-32C of the data), keeps every intact
record and says what it found: where the damage starts and what was read
before it. It needs no TensorFlow.

The checksums are computed by google-crc32c's C code; without it, by
`crc32c`: CRC-32C (Castagnoli) of many byte ranges at once, in NumPy: checking records
byte by byte in Python runs at a few MB/s; here every record is cut into
chunks of `CHUNK` bytes, aligned on the record's end, the chunks are
processed side by side (one vectorized table lookup per byte column), and
each record's chunk registers are folded together with the "append `CHUNK`
zero bytes" operator, which is linear.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterator

import google_crc32c
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


#: Bytes read from the file at a time (a record longer than that is read whole).
BLOCK = 1 << 22


def _checksum(data: bytes) -> int:
    """The masked CRC-32C of `data`: google-crc32c's C code where it has it
    (about 100 times faster), else `crc32c` in NumPy."""
    if google_crc32c.implementation == "c":
        crc = google_crc32c.value(data)
    else:
        crc = int(crc32c(np.frombuffer(data, np.uint8), [0], [len(data)])[0])
    rotated = ((crc >> 15) | (crc << 17)) & _ALL  # as `masked`, on one int
    return (rotated + _MASK_DELTA) & _ALL


class RecordReader:
    """The intact records of an event file, one at a time, a block of the
    file in memory at a time; `damage` says what is damaged once they are
    read (None: nothing).

    A record whose length fails its checksum ends the reading (the framing
    after it cannot be trusted); a record whose data fails its checksum is
    skipped and the reading goes on.

    Example:

    >>> reader = RecordReader("logs/events.out.tfevents.1")  # doctest: +SKIP
    >>> records = list(reader)  # doctest: +SKIP
    >>> reader.damage is None  # doctest: +SKIP
    True
    """

    def __init__(self, path: str, block: int = BLOCK) -> None:
        self.path, self.block = path, block
        self.damage: Damage | None = None
        self.records_read = self.skipped = 0
        self._first_skipped: int | None = None

    def __iter__(self) -> Iterator[bytes]:
        with open(self.path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            buffer, base, at = b"", 0, 0  # `buffer` starts at byte `base`
            problem = None
            while base + at < size:
                if len(buffer) - at < _HEADER + _FOOTER:
                    buffer, base, at = buffer[at:] + file.read(self.block), base + at, 0
                problem = self._framing(buffer, at, base + at, size)
                if problem is not None:
                    break
                (length,) = struct.unpack_from("<Q", buffer, at)
                end = at + _HEADER + length + _FOOTER
                if end > len(buffer):
                    more = file.read(max(self.block, end - len(buffer)))
                    buffer, base, at = buffer[at:] + more, base + at, 0
                    end = _HEADER + length + _FOOTER
                data = buffer[at + _HEADER : end - _FOOTER]
                if _checksum(data) == struct.unpack_from("<I", buffer, end - 4)[0]:
                    self.records_read += 1
                    yield data
                else:
                    self.skipped += 1
                    if self._first_skipped is None:
                        self._first_skipped = base + at
                at = end
            self._finish(problem, size)

    def _framing(self, buffer: bytes, at: int, offset: int, size: int) -> tuple | None:
        """What is wrong with the framing of the record at `offset`, if anything."""
        if size - offset < _HEADER:
            return "the file ends inside a record's header (cut short)", offset
        (length,) = struct.unpack_from("<Q", buffer, at)
        header_ok = (
            _checksum(buffer[at : at + 8])
            == struct.unpack_from("<I", buffer, at + 8)[0]
        )
        if not header_ok:
            return "a record's length is garbled (fails its checksum)", offset
        if offset + _HEADER + length + _FOOTER > size:
            return "the last record is cut short", offset
        return None

    def _finish(self, framing: tuple | None, size: int) -> None:
        if framing is None and not self.skipped:
            return
        problem, offset = framing or (None, size)
        if self.skipped:
            garbled = (
                f"{self.skipped} record(s) fail their checksum (garbled bytes), skipped"
            )
            problem = garbled if problem is None else f"{garbled}; then {problem}"
            offset = self._first_skipped
        self.damage = Damage(
            path=self.path,
            size=size,
            offset=offset,
            problem=problem,
            records_read=self.records_read,
            skipped=self.skipped,
            truncated=framing is not None,
        )


def read_records(path: str) -> tuple[list[bytes], Damage | None]:
    """The intact records of `path`, and what is damaged (None: nothing):
    `RecordReader`'s, as a list.

    Example:

    >>> records, damage = read_records("logs/events.out.tfevents.1")  # doctest: +SKIP
    """
    reader = RecordReader(path)
    records = list(reader)
    return records, reader.damage


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
