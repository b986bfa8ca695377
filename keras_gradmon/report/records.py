"""The records of a TFRecord (event) file, with every checksum verified, and
what is wrong with a damaged one.

TensorBoard's reader stops at the first damaged record without a word (a
truncated last record, garbled bytes), so a report built on it can miss the
end of a run silently. This reader walks the framing itself (length, masked
CRC-32C of the length, data, masked CRC-32C of the data), keeps every intact
record and says what it found: where the damage starts and what was read
before it. It needs no TensorFlow.

The checksums are computed with the TensorBoard recorder's own
`masked_crc32c` (google-crc32c: its C code, or its pure-Python fallback).
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterator

from keras_gradmon.recorders.tensorboard import masked_crc32c

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
                if masked_crc32c(data) == struct.unpack_from("<I", buffer, end - 4)[0]:
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
            masked_crc32c(buffer[at : at + 8])
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
